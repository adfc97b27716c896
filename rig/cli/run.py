"""`rig run`, `rig status`, `rig schema`, `rig reclassify`: running an experiment and its records."""

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rig.store.results import ResultsStore

from rig.cli.common import (
    ResultsOption,
    fail,
    interruptible,
    load_context,
    load_design,
    read_only_context,
    report_warnings,
    store_errors,
)
from rig.cli.main import app


@app.command()
def run(
    experiment: Annotated[Path, typer.Argument(help="An experiment config, e.g. experiments/x.toml.")],
    results_root: ResultsOption = None,
    keep_workspaces: Annotated[bool, typer.Option(help="Keep each run's workspace for debugging.")] = False,
    sandbox: Annotated[
        str,
        typer.Option(
            envvar="RIG_SANDBOX",
            help="auto: bubblewrap if installed, else run unconfined with a warning in every record; "
            "require: refuse without it; off: never.",
        ),
    ] = "auto",
    executor: Annotated[
        str,
        typer.Option(
            help="local: this process's threads (the experiment's workers); dask-local: a Dask "
            "LocalCluster of --workers processes; dask: the Dask cluster at --scheduler.",
        ),
    ] = "local",
    workers: Annotated[
        int | None,
        typer.Option(
            min=1, help="dask-local: how many worker processes (default 2); local runs take the experiment's."
        ),
    ] = None,
    agents_per_worker: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="dask-local: agents one worker runs at once (its agents resource; default 1). "
            "A cluster's workers declare theirs: dask worker --resources agents=N.",
        ),
    ] = None,
    scheduler: Annotated[
        str | None, typer.Option(help="dask: the scheduler's address, e.g. tcp://10.0.0.5:8786.")
    ] = None,
    preflight_only: Annotated[
        bool, typer.Option("--preflight-only", help="Only check this machine can run it (docs/preflight.md).")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan and its estimated cost and time; run nothing.")
    ] = False,
) -> None:
    """Run (or resume) an experiment: every task x condition x repetition, interleaved."""
    if executor not in ("local", "dask-local", "dask"):
        raise fail(f"unknown executor {executor!r}; use local, dask-local or dask")
    if (executor == "dask") != (scheduler is not None):
        raise fail("--scheduler goes with --executor dask (and only with it); give both or neither")
    for given, option in ((workers, "--workers"), (agents_per_worker, "--agents-per-worker")):
        if given is not None and executor != "dask-local":
            raise fail(
                f"{option} goes with --executor dask-local; a local run takes the experiment's workers, "
                "a cluster's workers declare their own (--resources agents=N)"
            )
    if dry_run:
        _dry_run(experiment, results_root, sandbox)
        return
    checks = _preflight(experiment, results_root, sandbox)
    for check in checks:
        if preflight_only or check.note:
            typer.echo(f"preflight: {check.line}", err=not preflight_only)
    if preflight_only:
        typer.echo(f"preflight: all {len(checks)} checks passed")
        return
    ctx = load_context(experiment, results_root, keep_workspaces, sandbox)
    with store_errors():
        _run(ctx, lambda: _executor(ctx, executor, sandbox, scheduler, workers or 2, agents_per_worker or 1))


def _preflight(experiment_path: Path, results_root: Path | None, sandbox: str):
    """rig.run.preflight's checks of the experiment on this machine; its first failure ends the command."""
    import shlex

    from rig import paths
    from rig.run.preflight import PreflightError, preflight
    from rig.workspace.build import default_runs_root

    experiment, tasks = load_design(experiment_path)
    try:
        hint = "`rig calibrate" + (f" --pack {shlex.quote(experiment.pack)}`" if experiment.pack else "`")
        return preflight(
            experiment,
            tasks,
            paths.results_root(experiment_path, results_root),
            default_runs_root(),
            sandbox,
            hint,
        )
    except PreflightError as exc:
        raise fail(str(exc)) from None


def _dry_run(experiment_path: Path, results_root: Path | None, sandbox: str) -> None:
    """Print the plan, what is recorded and what the rest would cost; then whether preflight passes."""
    from rig.experiment.estimate import dry_run

    read = read_only_context(experiment_path, results_root)
    with store_errors(), report_warnings():
        for line in dry_run(read.experiment, read.items, read.store):
            typer.echo(line)
    try:
        checks = _preflight(experiment_path, results_root, sandbox)
    except typer.Exit:
        typer.echo("preflight: fails (the error above); fix it before `rig run`")
        return
    typer.echo(f"preflight: all {len(checks)} checks passed; nothing was run")


def _executor(ctx, kind: str, sandbox: str, scheduler: str | None, workers: int, agents: int):
    """The executor `rig run` asked for; None for the local one (execute's default)."""
    if kind == "local":
        return None
    from rig.run.dask_executor import DaskExecutor, ExecutorError

    try:
        return DaskExecutor.start(
            ctx, sandbox, scheduler, workers, agents, lambda message: typer.echo(message, err=True)
        )
    except ExecutorError as exc:
        raise fail(str(exc)) from None


def _run(ctx, make_executor=lambda: None) -> None:
    """Execute the pending runs of `ctx` with a progress bar, then print the status per cell."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from rig.run.runner import execute, experiment_plan, pending_items, sequential_state
    from rig.store.results import StoreError
    from rig.workspace.build import PatchError, WorkspaceError

    items = experiment_plan(ctx)
    try:
        # Refused before anything is printed or repaired (execute holds the lock for the run itself).
        ctx.store.check_writer()
        pending, _ = pending_items(ctx, items)
        sequential = sequential_state(ctx, items)
    except StoreError as exc:
        raise fail(str(exc)) from exc
    recorded = len(items) - len(pending)
    decided = sequential is not None and sequential.stopped_at is not None
    if decided:
        pending = []  # the [stopping] rule decided from the records: a resume starts nothing
    console = Console(stderr=True)
    console.print(ctx.sandbox.warning() or f"sandbox: {ctx.sandbox.detail} (see `rig doctor`)")
    if ctx.network is not None:
        console.print(
            ctx.network.warning() or f"network: {ctx.network.policy}, {ctx.network.detail}", soft_wrap=True
        )
    console.print(f"verification copies: {ctx.scratch.folder}, {ctx.scratch.note}", soft_wrap=True)
    for condition, version in ctx.harness_versions.items():
        console.print(f"condition {condition}: {ctx.experiment.harness} {version}", soft_wrap=True)
    # A cluster is started (or joined) only when there is something to run on it.
    executor = make_executor() if pending else None
    slots = executor.slots if executor is not None else ctx.experiment.workers
    console.print(
        f"{ctx.experiment.name}: {len(items)} runs planned, {recorded} already recorded, "
        + ("none to run: \\[stopping] decided" if decided else f"{len(pending)} to run with {slots} workers")
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("ok {task.fields[ok]}  infra reruns {task.fields[infra]}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task_id = bar.add_task("runs", total=len(pending), ok=0, infra=0)

        def on_update(progress, record) -> None:
            bar.update(task_id, completed=progress.done, ok=progress.successes, infra=progress.infra)

        failure: Exception | None = None
        try:
            with interruptible():
                outcome = execute(ctx, items, on_update, executor)
        except (WorkspaceError, PatchError, StoreError, OSError) as exc:
            failure = exc  # reported once the progress bar is closed: the error is the last line
        except KeyboardInterrupt:
            bar.stop()
            typer.echo(
                "error: interrupted; running agents were killed, finished runs are kept; rerun to resume",
                err=True,
            )
            # A worker may be stuck inside a run; exiting normally would wait for it to finish.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
    if isinstance(failure, OSError):
        raise failure  # store_errors names the file and the fix
    if failure is not None:
        raise fail(f"{failure} (finished runs are kept; rerun to resume)") from failure
    _print_status(ctx, items)
    typer.echo(f"results: {ctx.store.root}")
    if outcome.stopped:
        raise fail(outcome.stopped, code=3)


def _sequential_line(result) -> str:
    """What the `[stopping]` rule says of the records: why the experiment stopped, or where it is."""
    a, b = result.stopping.compare
    fixed = f"{result.runs_recorded} of the fixed design's {result.runs_planned} runs recorded"
    if result.stopped_at is None:
        return (
            f"stopping ({b} vs {a}): {result.verdict} after {len(result.looks)} of {result.rounds} looks; "
            f"{fixed}"
        )
    return (
        f"stopped at look {result.stopped_at} of {result.rounds} ({b} vs {a}): {result.verdict}: "
        f"{result.reason}; {fixed}, {result.runs_saved} saved"
    )


def _print_status(ctx, items) -> None:
    from rich.console import Console
    from rich.table import Table

    from rig.experiment.budget import budget_line
    from rig.experiment.status import cell_status
    from rig.run.runner import sequential_state

    sequential = sequential_state(ctx, items)
    stopped = sequential is not None and sequential.stopped_at is not None
    cells = cell_status(items, ctx.store, ctx.experiment.max_attempts, stopped)
    table = Table(title=f"{ctx.experiment.name}: status per cell")
    columns = ["task", "condition", "done", "success", "pending", "quarantined", "infra reruns"]
    if sequential is not None:
        columns.append("not needed")
    for column in columns:
        table.add_column(column, justify="left" if column in ("task", "condition") else "right")
    for c in cells:
        row = [c.task, c.condition, f"{c.done}/{c.planned}", str(c.successes), str(c.pending)]
        row += [str(c.quarantined), str(c.infra_reruns)]
        table.add_row(*row, *([str(c.not_needed)] if sequential is not None else []))
    Console(width=120).print(table)
    if sequential is not None:
        typer.echo(_sequential_line(sequential))
    typer.echo(budget_line(ctx.experiment, ctx.store))


@app.command()
def status(
    experiment: Annotated[Path, typer.Argument(help="An experiment config, e.g. experiments/x.toml.")],
    results_root: ResultsOption = None,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="First make safe what a killed runner left: redact and mark abandoned the attempt "
            "folders it never recorded, remove its workspaces (refused while the experiment runs).",
        ),
    ] = False,
) -> None:
    """Print done / pending / quarantined runs per task x condition cell (reads only; starts nothing)."""
    from rig.store.migrate import RecordSchemaError

    ctx = read_only_context(experiment, results_root)
    if repair:
        with store_errors():
            _repair(ctx.store, ctx.experiment.name)
    try:
        with store_errors(), report_warnings():
            _print_status(ctx, ctx.items)
    except RecordSchemaError as exc:
        raise fail(str(exc)) from exc


def _repair(store: "ResultsStore", name: str) -> None:
    """What `rig run` does on resume before it starts anything, without running anything."""
    from rig import paths
    from rig.run.leftovers import clean_up, sweep_copies
    from rig.store.redact import Redactor
    from rig.workspace.build import default_runs_root
    from rig.workspace.scratch import verify_place

    if not store.root.is_dir():
        # Copies of other experiments' stopped runners are this command's to remove all the same.
        for message in sweep_copies().lines() or ["nothing to repair"]:
            typer.echo(message)
        return
    runs_root = default_runs_root().resolve()
    redactor = Redactor.for_machine(
        runs_root=runs_root,
        repo_root=paths.REPO_ROOT,
        results_root=store.root.parent.resolve(),
        verify_root=verify_place(workers=1).root,
    )
    with store.writer():
        messages = [*store.repair(), *clean_up(store, runs_root / name, redactor).lines()]
    for message in messages or ["nothing to repair"]:
        typer.echo(message)


@app.command()
def schema() -> None:
    """Print the JSON schema of a run record (one line of runs.jsonl)."""
    import json

    from rig.schema import RunRecord

    typer.echo(json.dumps(RunRecord.model_json_schema(), indent=2))


@app.command()
def reclassify(
    experiment: Annotated[Path, typer.Argument(help="An experiment config, e.g. experiments/x.toml.")],
    write: Annotated[
        bool, typer.Option("--write", help="Apply the changes (default: only show them).")
    ] = False,
    results_root: ResultsOption = None,
) -> None:
    """Re-parse stored sessions with the current rules; show (or with --write apply) the changes."""
    from rig.run.reclassify import reclassify as rederive

    # Stored sessions are re-parsed, nothing runs: runs of another environment are no obstacle.
    ctx = load_context(experiment, results_root, adds_runs=False)
    with store_errors():
        changes = rederive(ctx, write)
    for c in changes:
        verdict = f"{c.old_rule or 'scored'} -> {c.new_rule or 'scored'}"
        extra = " (metrics changed)" if c.metrics_changed else ""
        typer.echo(f"{c.source}: {c.run_id} attempt {c.attempt}: {verdict}{extra}")
    if not changes:
        typer.echo("no stored record changes under the current rules")
    elif not write:
        typer.echo(f"{len(changes)} records would change; rerun with --write to apply")
    else:
        typer.echo(f"{len(changes)} records changed; run `rig run {experiment}` to rerun new quarantines")

"""The `rig` command line. Heavy imports stay inside the commands that need them."""

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rig.schema import Experiment, PlanItem
    from rig.store.results import ResultsStore

app = typer.Typer(
    help="rig: a reproducible measurement rig for coding-agent harnesses.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def main() -> None:
    """rig: a reproducible measurement rig for coding-agent harnesses."""


@app.command()
def version() -> None:
    """Print rig's version: the release plus the git commit it runs from (what records pin)."""
    from rig import __version__

    typer.echo(__version__)


@app.command()
def calibrate(
    task: Annotated[
        list[str] | None, typer.Option("--task", "-t", help="Only this task (repeatable).")
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", "-w", min=1, help="Items verified in parallel.")
    ] = os.cpu_count() or 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON report instead.")] = False,
    pack: Annotated[
        Path | None, typer.Option(help="The task pack: a folder with pack.toml (default: the built-in pack).")
    ] = None,
    tasks_dir: Annotated[Path | None, typer.Option(help="Tasks root instead of the pack's.")] = None,
    hidden_dir: Annotated[Path | None, typer.Option(help="Hidden tests root instead of the pack's.")] = None,
    harness: Annotated[
        str | None,
        typer.Option(help="Prove a real CLI against the mock model instead: a harness name, or all."),
    ] = None,
) -> None:
    """Prove a pack's oracle (the clean fixture passes, baselines and decoys fail, solutions pass), or a
    harness."""
    import time

    from rig.calibrate.oracle import calibrate
    from rig.packs.manifest import PackError, load_pack
    from rig.packs.pins import save_pins
    from rig.packs.tasks import TaskError, load_tasks
    from rig.schema import ItemResult

    try:
        loaded = load_pack(pack.resolve() if pack else None)
        tasks = load_tasks(loaded, task, tasks_dir, hidden_dir)
    except (PackError, TaskError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc

    if harness is not None:
        _calibrate_harnesses(harness, tasks, workers, as_json)
        return

    def show(result: ItemResult) -> None:
        mark = "PASS" if result.passed else "FAIL"
        color = typer.colors.GREEN if result.passed else typer.colors.RED
        typer.echo(typer.style(f"[{mark}]", fg=color) + f" {result.name}: {result.reason}")

    start = time.monotonic()
    report = calibrate(loaded, tasks, workers, on_result=None if as_json else show)
    try:
        # Tasks or hidden tests from elsewhere are not the pack's: their calibration proves nothing of it.
        if tasks_dir is None and hidden_dir is None:
            save_pins(loaded, tasks, report)
    except OSError as exc:
        typer.echo(
            f"warning: calibration pins not saved ({exc}); `rig run` will say it was never run", err=True
        )
    if as_json:
        typer.echo(report.model_dump_json())
    else:
        total = report.passed + report.failed
        verdict = "all PASS" if report.ok else f"{report.failed} FAIL"
        typer.echo(
            f"calibrate {loaded.name}: {report.passed}/{total} passed, {verdict} "
            f"({len(tasks)} tasks, {workers} workers, {time.monotonic() - start:.1f}s)"
        )
    raise typer.Exit(0 if report.ok else 1)


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def _store_errors() -> Iterator[None]:
    """A results file the store cannot use (corrupt line, full disk) ends the command in one line."""
    from rig.store.results import StoreError

    try:
        yield
    except StoreError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise _fail(f"{where}{exc.strerror or exc}; fix that (free space?), then rerun to resume") from None


def _load_context(
    experiment_path: Path, results_root: Path | None, keep_workspaces: bool = False, sandbox: str = "auto"
):
    from harnesses.cli import CliNotFound
    from harnesses.registry import HarnessUnavailable
    from rig import paths
    from rig.confine.network import NetworkError
    from rig.confine.sandbox import SandboxError
    from rig.experiment.load import ExperimentError, load_experiment
    from rig.packs.manifest import PackError, load_pack
    from rig.packs.tasks import TaskError, load_tasks
    from rig.run.runner import make_context
    from rig.store.results import StoreError
    from rig.workspace.build import WorkspaceError, default_runs_root

    try:
        experiment = load_experiment(experiment_path)
        only = None if experiment.tasks == "all" else list(experiment.tasks)
        tasks = load_tasks(load_pack(experiment.pack), only)
        return make_context(
            experiment,
            tasks,
            results_root or paths.RESULTS_DIR,
            default_runs_root(),
            paths.REPO_ROOT,
            keep_workspaces,
            sandbox,
            notify=lambda message: typer.echo(message, err=True),
        )
    except (
        ExperimentError,
        PackError,
        TaskError,
        WorkspaceError,
        StoreError,
        HarnessUnavailable,
        CliNotFound,
        SandboxError,
        NetworkError,
    ) as exc:
        # CliNotFound includes HarnessVersionError: a harness whose version cannot be pinned.
        raise _fail(str(exc)) from exc


@dataclass(frozen=True)
class ReadOnlyContext:
    """What `rig status` needs of an experiment: its design, its plan and its results store."""

    experiment: "Experiment"
    items: "list[PlanItem]"
    store: "ResultsStore"


def _read_only_context(experiment_path: Path, results_root: Path | None) -> ReadOnlyContext:
    """The experiment and its results as they are, without writing anything or starting a harness.

    `_load_context` prepares a run: it pins every input (starting the harness CLI for its version),
    creates the runs folder and binds the results folder to the design. A reader needs none of that,
    and must not do it: it may run beside a running experiment, on a read-only copy of the results,
    or on a machine without the harness. The design is still checked against experiment.json
    (read only), so a changed config is refused here as `rig run` would refuse it.
    """
    import json

    from rig import paths
    from rig.experiment.load import ExperimentError, load_experiment
    from rig.experiment.plan import plan
    from rig.packs.manifest import PackError, load_pack
    from rig.packs.tasks import TaskError, load_tasks
    from rig.store.migrate import design_digest
    from rig.store.results import ResultsStore

    try:
        experiment = load_experiment(experiment_path)
        only = None if experiment.tasks == "all" else list(experiment.tasks)
        tasks = load_tasks(load_pack(experiment.pack), only)
    except (ExperimentError, PackError, TaskError) as exc:
        raise _fail(str(exc)) from exc
    store = ResultsStore((results_root or paths.RESULTS_DIR) / experiment.name)
    design = store.root / "experiment.json"
    if design.is_file():
        try:
            stored = json.loads(design.read_text())
            digest = design_digest(stored) if isinstance(stored, dict) else None
        except (OSError, ValueError) as exc:
            raise _fail(f"{design}: cannot read it ({exc}); restore it from a backup") from exc
        if digest != experiment.digest():
            raise _fail(
                f"{store.root} holds results of a different design of {experiment.name!r}; "
                "give the changed experiment a new name, or move the old results away"
            )
    return ReadOnlyContext(experiment, plan(experiment, [t.id for t in tasks]), store)


@contextmanager
def _report_warnings() -> Iterator[None]:
    """Print the rig's warnings about the results read (duplicate records dropped) as `warning:` lines.

    Printed only when the command succeeds: a failing command keeps its one-line `error:`.
    """
    import warnings

    from rig.store.migrate import DuplicateRunWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DuplicateRunWarning)
        yield
    shown: set[str] = set()
    for w in caught:
        if not issubclass(w.category, DuplicateRunWarning):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        elif str(w.message) not in shown:
            shown.add(str(w.message))
            typer.echo(f"warning: {w.message}", err=True)


ResultsOption = Annotated[
    Path | None,
    typer.Option("--results-root", envvar="RIG_RESULTS_ROOT", help="Default: experiments/results/."),
]


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
        raise _fail(f"unknown executor {executor!r}; use local, dask-local or dask")
    if (executor == "dask") != (scheduler is not None):
        raise _fail("--scheduler goes with --executor dask (and only with it); give both or neither")
    for given, option in ((workers, "--workers"), (agents_per_worker, "--agents-per-worker")):
        if given is not None and executor != "dask-local":
            raise _fail(
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
    ctx = _load_context(experiment, results_root, keep_workspaces, sandbox)
    with _store_errors():
        _run(ctx, lambda: _executor(ctx, executor, sandbox, scheduler, workers or 2, agents_per_worker or 1))


def _preflight(experiment_path: Path, results_root: Path | None, sandbox: str):
    """rig.run.preflight's checks of the experiment on this machine; its first failure ends the command."""
    import shlex

    from rig import paths
    from rig.experiment.load import ExperimentError, load_experiment
    from rig.packs.manifest import PackError, load_pack
    from rig.packs.tasks import TaskError, load_tasks
    from rig.run.preflight import PreflightError, preflight
    from rig.workspace.build import default_runs_root

    try:
        experiment = load_experiment(experiment_path)
        only = None if experiment.tasks == "all" else list(experiment.tasks)
        tasks = load_tasks(load_pack(experiment.pack), only)
        hint = "`rig calibrate" + (f" --pack {shlex.quote(experiment.pack)}`" if experiment.pack else "`")
        return preflight(
            experiment, tasks, results_root or paths.RESULTS_DIR, default_runs_root(), sandbox, hint
        )
    except (ExperimentError, PackError, TaskError, PreflightError) as exc:
        raise _fail(str(exc)) from None


def _dry_run(experiment_path: Path, results_root: Path | None, sandbox: str) -> None:
    """Print the plan, what is recorded and what the rest would cost; then whether preflight passes."""
    from rig.experiment.estimate import dry_run

    read = _read_only_context(experiment_path, results_root)
    with _store_errors(), _report_warnings():
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
        raise _fail(str(exc)) from None


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
        raise _fail(str(exc)) from exc
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

        previous = signal.signal(signal.SIGTERM, _interrupt)
        failure: Exception | None = None
        try:
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
        finally:
            signal.signal(signal.SIGTERM, previous)
    if isinstance(failure, OSError):
        raise failure  # _store_errors names the file and the fix
    if failure is not None:
        raise _fail(f"{failure} (finished runs are kept; rerun to resume)") from failure
    _print_status(ctx, items)
    typer.echo(f"results: {ctx.store.root}")
    if outcome.stopped:
        raise _fail(outcome.stopped, code=3)


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


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM ends `rig run` as Ctrl-C does: agents killed, finished runs kept."""
    raise KeyboardInterrupt


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

    ctx = _read_only_context(experiment, results_root)
    if repair:
        with _store_errors():
            _repair(ctx.store, ctx.experiment.name)
    try:
        with _store_errors(), _report_warnings():
            _print_status(ctx, ctx.items)
    except RecordSchemaError as exc:
        raise _fail(str(exc)) from exc


def _repair(store: "ResultsStore", name: str) -> None:
    """What `rig run` does on resume before it starts anything, without running anything."""
    from rig import paths
    from rig.run.leftovers import clean_up
    from rig.store.redact import Redactor
    from rig.workspace.build import default_runs_root
    from rig.workspace.scratch import verify_place

    if not store.root.is_dir():
        typer.echo("nothing to repair")
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

    ctx = _load_context(experiment, results_root)
    with _store_errors():
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


def _calibrate_harnesses(choice: str, tasks, workers: int, as_json: bool) -> None:
    import json
    import time

    from harnesses.cli import CliNotFound
    from harnesses.registry import calibrated_names
    from rig import paths
    from rig.calibrate.harness import calibrate_harnesses
    from rig.schema import HarnessCheck

    known = calibrated_names()
    names = list(known) if choice == "all" else [choice]
    if any(name not in known for name in names):
        raise _fail(f"unknown harness {choice!r}; use one of {', '.join(known)} or all")

    def show(check: HarnessCheck) -> None:
        mark = "PASS" if check.passed else "FAIL"
        color = typer.colors.GREEN if check.passed else typer.colors.RED
        typer.echo(typer.style(f"[{mark}]", fg=color) + f" {check.harness} {check.name}: {check.reason}")

    start = time.monotonic()
    try:
        results = calibrate_harnesses(
            names, tasks, paths.REPO_ROOT, workers, on_result=None if as_json else show
        )
    except CliNotFound as exc:
        raise _fail(str(exc)) from exc
    passed = sum(r.passed for r in results)
    if as_json:
        typer.echo(json.dumps({"ok": passed == len(results), "checks": [r.model_dump() for r in results]}))
    else:
        verdict = "all PASS" if passed == len(results) else f"{len(results) - passed} FAIL"
        typer.echo(
            f"calibrate --harness {choice}: {passed}/{len(results)} passed, {verdict} "
            f"({time.monotonic() - start:.0f}s)"
        )
    raise typer.Exit(0 if passed == len(results) else 1)


pack_app = typer.Typer(help="Task packs: make one from your own repository.", no_args_is_help=True)
app.add_typer(pack_app, name="pack")


@pack_app.command("new")
def pack_new(
    path: Annotated[Path, typer.Argument(help="Where to write the pack: a new or empty folder.")],
    from_repo: Annotated[
        Path | None,
        typer.Option("--from", help="The git repository to snapshot (default: the current directory)."),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="The pack's name (default: the repository folder's, lowercased).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace PATH if it is not empty.")] = False,
    example: Annotated[
        bool,
        typer.Option(
            "--example/--no-example",
            help="Write a placeholder task to fill in (--no-example: none, for `rig task mine`).",
        ),
    ] = True,
) -> None:
    """Scaffold a task pack from a git repository: its tracked files at HEAD as the fixture, a
    best-guess pack.toml and an example task to fill in."""
    from rig.packs.new import ScaffoldError, scaffold

    try:
        made = scaffold(path, from_repo or Path.cwd(), name, force, example)
    except ScaffoldError as exc:
        raise _fail(str(exc)) from None
    typer.echo(made.summary(str(path)))


@pack_app.command("stats")
def pack_stats(
    experiment: Annotated[Path, typer.Argument(help="An experiment config, e.g. experiments/x.toml.")],
    results_root: ResultsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Each task's success rate per condition in an experiment's results, flagging the tasks every
    run solved or no run solved: they cannot tell the conditions apart (reads only)."""
    import json

    from rich.console import Console
    from rich.table import Table

    from rig.experiment.status import cell_status
    from rig.packs.stats import task_stats
    from rig.store.migrate import RecordSchemaError

    ctx = _read_only_context(experiment, results_root)
    try:
        with _store_errors(), _report_warnings():
            stats = task_stats(cell_status(ctx.items, ctx.store, ctx.experiment.max_attempts))
    except RecordSchemaError as exc:
        raise _fail(str(exc)) from exc
    if as_json:
        typer.echo(json.dumps([s.model_dump() for s in stats]))
        return
    conditions = [c.name for c in ctx.experiment.conditions]
    table = Table(title=f"{ctx.experiment.name}: success per task and condition")
    table.add_column("task")
    for condition in conditions:
        table.add_column(condition, justify="right")
    table.add_column("flag")
    for s in stats:
        cells = []
        for condition in conditions:
            rate = s.rate(condition)
            runs = s.runs.get(condition, 0)
            cells.append("-" if rate is None else f"{rate:.0%} ({s.successes.get(condition, 0)}/{runs})")
        table.add_row(s.task, *cells, s.flag or "")
    Console(width=160).print(table)
    flagged = [s.task for s in stats if s.flag]
    if flagged:
        typer.echo(
            f"{len(flagged)} of {len(stats)} tasks cannot tell the conditions apart ({', '.join(flagged)}); "
            "drop them from the experiment's tasks, or make them harder or easier, before the next one"
        )


task_app = typer.Typer(help="Tasks: mine them from a repository's history.", no_args_is_help=True)
app.add_typer(task_app, name="task")


@task_app.command("mine")
def task_mine(
    repo: Annotated[Path, typer.Argument(help="The git repository the pack's fixture was taken from.")],
    pack: Annotated[Path, typer.Option(help="The task pack to add the tasks to: a folder with pack.toml.")],
    since: Annotated[
        str | None, typer.Option(help="Only commits after this one (a commit, tag or branch).")
    ] = None,
    max_commits: Annotated[
        int, typer.Option("--max", min=1, help="Look at this many commits at most, newest first.")
    ] = 50,
    commit: Annotated[
        list[str] | None,
        typer.Option("--commit", help="Only this commit (repeatable); --since and --max then do nothing."),
    ] = None,
    snapshot: Annotated[
        str | None,
        typer.Option(help="The commit the fixture was taken at (default: pack.toml's [source] commit)."),
    ] = None,
    tests: Annotated[
        list[str] | None,
        typer.Option(
            "--tests",
            help="Glob of test file paths (repeatable; default: the runner kind's test file names).",
        ),
    ] = None,
    template: Annotated[
        Path | None,
        typer.Option(help="Prompt template with $title and $details (default: the pack's mine-prompt.md)."),
    ] = None,
    timeout_s: Annotated[int, typer.Option(min=1, help="The mined tasks' timeout_s.")] = 900,
    workers: Annotated[
        int, typer.Option("--workers", "-w", min=1, help="Commits measured in parallel.")
    ] = os.cpu_count() or 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON report instead.")] = False,
) -> None:
    """Turn the fixes in a repository's history into calibrated tasks of a pack; every commit looked
    at is mined or skipped with its reason."""
    from collections import Counter

    from rich.console import Console
    from rich.table import Table

    from rig.mine.history import MineError
    from rig.mine.miner import mine
    from rig.packs.manifest import PackError, load_pack
    from rig.schema import MinedCommit

    try:
        loaded = load_pack(pack.resolve())
    except PackError as exc:
        raise _fail(str(exc)) from None

    def show(entry: MinedCommit) -> None:
        mark = typer.style("[measured]", fg=typer.colors.GREEN) if entry.verdict == "mined" else "[skipped]"
        typer.echo(f"{mark} {entry.commit[:10]} {entry.subject[:60]}: {entry.verdict}: {entry.reason}")

    try:
        report = mine(
            loaded,
            repo,
            snapshot=snapshot,
            since=since,
            commits=commit,
            max_commits=max_commits,
            workers=workers,
            template=template,
            test_globs=tests,
            timeout_s=timeout_s,
            on_result=None if as_json else show,
            say=None if as_json else typer.echo,
        )
    except MineError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        typer.echo(report.model_dump_json())
        return
    table = Table(title=f"rig task mine: {len(report.commits)} commits of {repo} into {loaded.name}")
    for column in ("commit", "verdict", "task or reason"):
        table.add_column(column)
    for entry in report.commits:
        table.add_row(entry.commit[:10], entry.verdict, entry.task or entry.reason)
    Console(width=160).print(table)
    counts = Counter(entry.verdict for entry in report.commits)
    mined = counts.pop("mined", 0)
    skipped = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
    typer.echo(f"mined {mined}; skipped {sum(counts.values())}" + (f" ({skipped})" if skipped else ""))
    if mined:
        typer.echo(
            f'next: rig calibrate --pack {pack}, then an experiment with pack = "{pack}" (docs/mining.md)'
        )


mock_app = typer.Typer(help="The scripted mock model server.", no_args_is_help=True)
app.add_typer(mock_app, name="mock-model")


@mock_app.command("serve")
def mock_serve(
    task: Annotated[str, typer.Option(help="Task whose patches the policy replays.")] = "t1_fix_pagination",
    policy: Annotated[
        str, typer.Option(help="solution, decoy, nothing, delete_confirmed or delete_unconfirmed.")
    ] = "solution",
    decoy: Annotated[str | None, typer.Option(help="Decoy name, with --policy decoy.")] = None,
    fault: Annotated[
        str, typer.Option(help="none, http_error, silence, never_answer or cut_stream.")
    ] = "none",
    status: Annotated[int, typer.Option(help="HTTP status for --fault http_error.")] = 500,
    first_n: Annotated[int | None, typer.Option(help="Misbehave on the first N requests only.")] = None,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 0,
    harness: Annotated[
        str | None,
        typer.Option(
            help="Serve this harness's protocol with its tool names (default: every harness's; where "
            "two share a path, the first registered)."
        ),
    ] = None,
    pack: Annotated[
        Path | None, typer.Option(help="The task pack of --task (default: the built-in pack).")
    ] = None,
) -> None:
    """Serve the mock model on 127.0.0.1 until interrupted, then print its ledger."""
    import json
    import threading
    from dataclasses import asdict

    from harnesses.mock_model.server import Faults, MockModelServer
    from harnesses.mock_model.session import policy_for
    from harnesses.registry import HarnessUnavailable, mock_protocols
    from rig.packs.manifest import PackError, load_pack
    from rig.packs.tasks import TaskError, load_tasks

    if fault not in ("none", "http_error", "silence", "never_answer", "cut_stream"):
        raise _fail(f"unknown fault {fault!r}; use none, http_error, silence, never_answer or cut_stream")
    try:
        (loaded,) = load_tasks(load_pack(pack.resolve() if pack else None), [task])
        chosen = policy_for(loaded, {"mock_policy": policy, "decoy": decoy})
        protocols = mock_protocols((harness,) if harness else None)
    except (PackError, TaskError, ValueError, HarnessUnavailable) as exc:
        raise _fail(str(exc)) from exc
    faults = Faults(mode=fault, status=status, first_n=first_n)  # type: ignore[arg-type]
    server = MockModelServer(chosen, protocols, faults=faults, listen_port=port).start()
    typer.echo(f"mock model ({chosen.name}) on {server.base_url}  (Ctrl-C to stop)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        typer.echo(json.dumps([asdict(e) for e in server.ledger], indent=2))


def _results_folder(experiment_path: Path, results_root: Path | None) -> Path:
    from rig import paths
    from rig.experiment.load import ExperimentError, load_experiment

    try:
        name = load_experiment(experiment_path).name
    except ExperimentError as exc:
        raise _fail(str(exc)) from exc
    folder = (results_root or paths.RESULTS_DIR) / name
    if not (folder / "runs.jsonl").is_file():
        raise _fail(f"{folder} has no runs.jsonl; run `rig run {experiment_path}` first")
    return folder


@app.command()
def report(
    experiment: Annotated[Path, typer.Argument(help="The experiment config whose results to report.")],
    vs: Annotated[
        Path | None, typer.Option("--vs", help="Compare with another experiment, arm by arm.")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Output folder (default: the results folder).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="md or html.")] = "md",
    allow_mixed_pins: Annotated[
        bool,
        typer.Option(
            help="Pool records whose pins differ (fixture, task or hidden-test hashes, harness version, "
            "model, rig version, python, ruff, pytest or toolchain hash)."
        ),
    ] = False,
    results_root: ResultsOption = None,
) -> None:
    """Write report.md (or .html), failures.md and figures: per-cell rates, comparisons with CIs."""
    from rig.analysis import PoolingError
    from rig.packs.manifest import PackError
    from rig.report.report import build_report

    if fmt not in ("md", "html"):
        raise _fail(f"unknown format {fmt!r}; use md or html")
    folders = [_results_folder(experiment, results_root)]
    if vs is not None:
        folders.append(_results_folder(vs, results_root))
    target = out or folders[0]
    try:
        with _store_errors(), _report_warnings():
            written = build_report(
                folders, target, vs=vs is not None, fmt=fmt, allow_mixed_pins=allow_mixed_pins
            )
    except (PoolingError, PackError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    for path in written:
        typer.echo(str(path))


@app.command()
def export(
    experiment: Annotated[Path, typer.Argument(help="The experiment config whose attempts to export.")],
    fmt: Annotated[str, typer.Option("--format", help="atif (Harbor's trajectory format).")] = "atif",
    out: Annotated[
        Path | None, typer.Option(help="Output folder (default: <results>/<experiment>/atif/).")
    ] = None,
    results_root: ResultsOption = None,
) -> None:
    """Write one trajectory per attempt (scored and quarantined), with the rig's verdict and pins."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from rig import paths
    from rig.export.atif import FORMATS, ExportError, export_atif
    from rig.store.redact import Redactor
    from rig.workspace.build import default_runs_root

    if fmt not in FORMATS:
        raise _fail(f"unknown format {fmt!r}; use {', '.join(FORMATS)}")
    folder = _results_folder(experiment, results_root)
    target = out or folder / fmt
    # Transcripts hold raw tool output and working directories: redacted like the records.
    redactor = Redactor.for_machine(
        runs_root=default_runs_root(), repo_root=paths.REPO_ROOT, results_root=folder.parent
    )
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    try:
        with (
            _store_errors(),
            Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar,
        ):
            task_id = bar.add_task("trajectories", total=None)
            exported = export_atif(
                folder, target, redactor, lambda done, total: bar.update(task_id, completed=done, total=total)
            )
    except ExportError as exc:
        raise _fail(f"{exc}; nothing was written") from exc
    gaps = f", {exported.gaps} with parts of the session unreadable (see notes)" if exported.gaps else ""
    typer.echo(
        f"{exported.total} ATIF trajectories ({exported.scored} scored, {exported.quarantined} "
        f"quarantined{gaps}) in {exported.folder}"
    )


@app.command()
def view(
    experiment: Annotated[Path, typer.Argument(help="The experiment config whose results to show.")],
    vs: Annotated[
        Path | None, typer.Option("--vs", help="Show it beside another experiment, compared arm by arm.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Output folder (default: view/ in the results folder; view-vs-OTHER/ with --vs)."),
    ] = None,
    serve: Annotated[bool, typer.Option("--serve", help="Then serve it on 127.0.0.1 until Ctrl-C.")] = False,
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port for --serve (0: any free one).")] = 8765,
    allow_mixed_pins: Annotated[
        bool, typer.Option(help="Pool records whose pins differ in the overview (as `rig report` does).")
    ] = False,
    results_root: ResultsOption = None,
) -> None:
    """Write a static site of the results: the report's overview, a filterable run table and one page
    per attempt (transcript, diff, verdicts, receipts); it works opened from disk."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from rig.analysis import PoolingError
    from rig.packs.manifest import PackError
    from rig.report.links import INDEX_PAGE
    from rig.view.site import ViewError, build_view, make_server, serve_root

    folders = [_results_folder(experiment, results_root)]
    if vs is not None:
        folders.append(_results_folder(vs, results_root))
    console = Console(stderr=True)
    columns = (TextColumn("pages"), BarColumn(), MofNCompleteColumn())
    try:
        with (
            _store_errors(),
            _report_warnings(),
            Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar,
        ):
            task = bar.add_task("pages", total=None)
            written = build_view(
                folders,
                out,
                vs=vs is not None,
                allow_mixed_pins=allow_mixed_pins,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
    except (PoolingError, PackError, ViewError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    index = written / INDEX_PAGE
    typer.echo(str(index))
    if not serve:
        return
    root = serve_root(written, folders)
    try:
        server = make_server(root, port)
    except OSError as exc:
        raise _fail(
            f"cannot serve on 127.0.0.1:{port}: {exc.strerror or exc}; choose another --port"
        ) from exc
    url = f"http://127.0.0.1:{server.server_address[1]}/{index.relative_to(root).as_posix()}"
    typer.echo(f"serving {root} at {url} (Ctrl-C stops)")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        typer.echo("stopped")
    finally:
        server.server_close()


@app.command()
def power(
    tasks: Annotated[int, typer.Option(min=1, help="Tasks in the design.")] = 5,
    base_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Success rate of the reference arm.")
    ] = 0.5,
    effect: Annotated[float, typer.Option(help="Difference in success rate to detect (b - a).")] = 0.2,
    cost_ratio: Annotated[
        float | None, typer.Option(help="Also: ratio of median costs to detect (e.g. 0.7).")
    ] = None,
    cost_sigma: Annotated[float, typer.Option(help="Log-normal sigma of per-run cost.")] = 0.5,
    alpha: Annotated[float, typer.Option(help="Significance level.")] = 0.05,
    target: Annotated[float, typer.Option(help="Power wanted.")] = 0.8,
    sims: Annotated[int, typer.Option(min=50, help="Simulated experiments per design.")] = 400,
    seed: int = 0,
    max_reps: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Also: the sequential design of [stopping] with at most this many repetitions "
            "(expected and maximum runs at --effect and at no effect).",
        ),
    ] = None,
    min_effect: Annotated[
        float | None, typer.Option(help="[stopping]'s smallest effect worth detecting (default: --effect).")
    ] = None,
    experiment: Annotated[
        Path | None,
        typer.Option(
            help="Take the sequential design from this experiment's [stopping] (its tasks, conditions, "
            "alpha, min_effect and max_repetitions)."
        ),
    ] = None,
) -> None:
    """Repetitions per task needed to detect an effect, by simulating the experiment's design; with
    --max-reps or --experiment, also the runs a sequential ([stopping]) design uses."""
    from rig.analysis import reps_for_power, reps_for_power_cost

    conditions = 2
    if experiment is not None:
        tasks, conditions, alpha, min_effect, max_reps = _stopping_design(experiment)
    try:
        reps = reps_for_power(base_rate, effect, tasks, alpha=alpha, target=target, n_sim=sims, seed=seed)
    except ValueError as exc:
        raise _fail(str(exc)) from exc
    typer.echo(
        f"success {base_rate:.2f} -> {base_rate + effect:.2f} over {tasks} tasks: "
        f"{reps} repetitions per task per condition for power {target:.2f} at alpha {alpha}"
    )
    if max_reps is not None:
        _sequential_power(
            base_rate, effect, tasks, conditions, alpha, min_effect or effect, max_reps, sims, seed
        )
    if cost_ratio is not None:
        try:
            cost_reps = reps_for_power_cost(
                cost_ratio, cost_sigma, tasks, alpha=alpha, target=target, n_sim=sims, seed=seed
            )
        except ValueError as exc:
            raise _fail(str(exc)) from exc
        typer.echo(
            f"median cost x{cost_ratio:.2f} (sigma {cost_sigma}) over {tasks} tasks: "
            f"{cost_reps} repetitions per task per condition for power {target:.2f} at alpha {alpha}"
        )


def _stopping_design(path: Path) -> tuple[int, int, float, float, int]:
    """(tasks, conditions, alpha, min_effect, max repetitions) of an experiment's [stopping]."""
    from rig.experiment.load import ExperimentError, load_experiment
    from rig.packs.manifest import PackError, load_pack
    from rig.packs.tasks import TaskError, load_tasks

    try:
        exp = load_experiment(path)
        tasks = load_tasks(load_pack(exp.pack), None if exp.tasks == "all" else list(exp.tasks))
    except (ExperimentError, PackError, TaskError) as exc:
        raise _fail(str(exc)) from exc
    if exp.stopping is None:
        raise _fail(f"{path} has no [stopping] table; add one, or give --max-reps instead")
    stop = exp.stopping
    return len(tasks), len(exp.conditions), stop.alpha, stop.min_effect, exp.planned_repetitions


def _sequential_power(
    base_rate: float,
    effect: float,
    tasks: int,
    conditions: int,
    alpha: float,
    min_effect: float,
    max_reps: int,
    sims: int,
    seed: int,
) -> None:
    """Print the sequential design's power and runs at `effect` and at no effect, by simulation."""
    from rig.analysis import power_success
    from rig.analysis.sequential import simulate_sequential

    try:
        at_effect, at_none = (
            simulate_sequential(
                base_rate, e, tasks, max_reps, min_effect, alpha, sims, seed, n_conditions=conditions
            )
            for e in (effect, 0.0)
        )
        fixed = power_success(base_rate, effect, tasks, max_reps, alpha=alpha, n_sim=sims, seed=seed)
    except ValueError as exc:
        raise _fail(str(exc)) from exc
    typer.echo(
        f"sequential design ([stopping]: min_effect {min_effect:g}, alpha {alpha:g}, at most {max_reps} "
        f"repetitions, {tasks} tasks x {conditions} conditions; fixed design {at_effect.fixed_runs} runs):"
    )
    for label, sim in ((f"effect {effect:+.2f}", at_effect), ("no effect", at_none)):
        typer.echo(
            f"  at {label}: effect found {sim.rejected:.3f}, no effect of min_effect {sim.no_effect:.3f}; "
            f"runs expected {sim.expected_runs:.1f}, at most {sim.max_runs} (of {sim.fixed_runs})"
        )
    typer.echo(f"  the fixed design of {max_reps} repetitions has power {fixed:.3f} at effect {effect:+.2f}")


@app.command()
def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON list instead.")] = False,
    strict: Annotated[bool, typer.Option(help="Exit 1 if any protection is inactive.")] = False,
    pack: Annotated[
        Path | None, typer.Option(help="Show the protected paths of this pack (default: the built-in pack).")
    ] = None,
) -> None:
    """Report which of the rig's protections (sandbox, network, cleanup, bounds, audit) are active here."""
    import json

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from rig.packs.manifest import PackError, load_pack
    from rig.run.doctor import diagnose

    try:
        protections = diagnose(load_pack(pack.resolve() if pack else None))
    except PackError as exc:
        raise _fail(str(exc)) from exc
    if as_json:
        typer.echo(json.dumps([p.model_dump() for p in protections], indent=2))
    else:
        table = Table(title="rig doctor: protections on this machine")
        for column in ("protection", "state", "detail"):
            table.add_column(column)
        for p in protections:
            state = "[green]active[/green]" if p.active else "[red]INACTIVE[/red]"
            table.add_row(p.name, state, escape(p.detail))
        Console(width=160).print(table)
    if strict and not all(p.active for p in protections):
        raise typer.Exit(1)

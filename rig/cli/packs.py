"""`rig pack new`, `rig pack stats`, `rig task mine`: packs and tasks from a repository."""

import os
from pathlib import Path
from typing import Annotated

import typer

from rig.cli.common import (
    ResultsOption,
    fail,
    interruptible,
    read_only_context,
    report_warnings,
    store_errors,
)
from rig.cli.main import app

# The funnel line `rig task mine` prints: each step's count (rig.schema.MineFunnel) and its words.
FUNNEL_WORDS = {
    "read": "read",
    "changes": "with source and tests",
    "applied": "applied",
    "not_flaky": "not flaky",
    "passed_after": "pass after the fix",
    "failed_before": "fail before it",
    "described": "described",
    "calibrated": "calibrated",
    "kept": "kept",
}

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
    setup: Annotated[
        list[str] | None,
        typer.Option(
            "--setup",
            help="A shell line for [environment] setup, run once after the install (repeatable; "
            "added after the guessed ones).",
        ),
    ] = None,
    build: Annotated[
        list[str] | None,
        typer.Option(
            "--build",
            help="A shell line for [environment] build, deriving files on every tree (repeatable; "
            "added after the guessed ones).",
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check/--no-check",
            help="With an [environment]: build it and run the gate on the clean fixture in it before "
            "saying done (exit 1 if either fails; the pack stays written).",
        ),
    ] = True,
) -> None:
    """Scaffold a task pack from a git repository: its tracked files at HEAD as the fixture, a
    best-guess pack.toml (for a Python project, an [environment] inferred from its pyproject.toml,
    requirements files, tox.ini and CI workflows) and an example task to fill in."""
    from rig.packs.check import check_environment
    from rig.packs.new import ScaffoldError, scaffold

    try:
        with interruptible():
            made = scaffold(path, from_repo or Path.cwd(), name, force, example, setup or [], build or [])
    except KeyboardInterrupt:
        # The pack is written beside PATH and renamed into place last: nothing of it was kept.
        raise fail(f"interrupted; {path} was left as it was", code=130) from None
    except ScaffoldError as exc:
        raise fail(str(exc)) from None
    typer.echo(made.summary(str(path)))
    if check and made.detected.environment is not None:
        typer.echo("building the environment and running the gate on the clean fixture in it ...")
        try:
            with interruptible():
                checked = check_environment(path.expanduser().absolute(), str(path))
        except KeyboardInterrupt:
            raise fail(
                f"interrupted while checking; the pack is written at {path}: check it with "
                f"`rig env build {path}` and `rig calibrate --pack {path}`",
                code=130,
            ) from None
        typer.echo("\n".join(checked.lines))
        if not checked.ok:
            raise typer.Exit(1)


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

    ctx = read_only_context(experiment, results_root)
    try:
        with store_errors(), report_warnings():
            stats = task_stats(cell_status(ctx.items, ctx.store, ctx.experiment.max_attempts))
    except RecordSchemaError as exc:
        raise fail(str(exc)) from exc
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
    base: Annotated[
        str,
        typer.Option(
            help="Where tasks start: auto (the fix reversed on the snapshot, at the fix's parent when "
            "that does not apply), parent (always at the parent) or snapshot (never at the parent)."
        ),
    ] = "auto",
    workers: Annotated[
        int, typer.Option("--workers", "-w", min=1, help="Commits measured in parallel.")
    ] = os.cpu_count() or 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON report instead.")] = False,
) -> None:
    """Turn the fixes in a repository's history into calibrated tasks of a pack; every commit looked
    at is mined or skipped with its reason."""
    import shutil
    import signal
    import sys
    import tempfile

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from rig.confine.proc import kill_running_commands
    from rig.env.activate import activate
    from rig.env.uvtool import EnvError
    from rig.mine.history import MineError
    from rig.mine.miner import JOURNAL, mine
    from rig.packs.manifest import PackError, load_pack
    from rig.schema import MinedCommit
    from rig.schema.reports import FUNNEL_STAGES

    if base not in ("auto", "parent", "snapshot"):
        raise fail(f"--base {base!r}: use auto, parent or snapshot")
    try:
        loaded = load_pack(pack.resolve())
        # Built (or found in the cache) once, before commits are measured in parallel.
        activate(loaded, lambda line: typer.echo(line, err=True))
    except (PackError, EnvError) as exc:
        raise fail(str(exc)) from None

    def show(entry: MinedCommit) -> None:
        mark = typer.style("[measured]", fg=typer.colors.GREEN) if entry.verdict == "mined" else "[skipped]"
        mark = "[earlier]" if entry.earlier else mark
        where = " (at its parent)" if entry.base == "parent" else ""
        typer.echo(f"{mark} {entry.commit[:10]} {entry.subject[:60]}{where}: {entry.verdict}: {entry.reason}")

    # Ctrl-C (or SIGTERM) ends the mining at once, whatever step it is in: the verification
    # commands in flight are killed and the scratch copies removed. What was done stays: each task
    # went into the pack once calibrated (in steps that leave it whole at any moment), each
    # verdict into its journal, which a rerun reads instead of measuring the commit again.
    work = Path(tempfile.mkdtemp(prefix="rig-mine-"))
    journal = loaded.root / JOURNAL

    def interrupted(signum: int, frame: object) -> None:
        # A second signal inside this handler would run it again while it holds what it cleans up.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kill_running_commands()
        shutil.rmtree(work, ignore_errors=True)
        typer.echo(
            f"error: interrupted; the tasks kept so far stay in the pack, every verdict so far in {journal} "
            "(a rerun goes on from there)",
            err=True,
        )
        sys.stdout.flush()
        os._exit(130)

    previous = signal.signal(signal.SIGINT, interrupted), signal.signal(signal.SIGTERM, interrupted)
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
            base=base,  # type: ignore[arg-type]
            on_result=None if as_json else show,
            say=None if as_json else typer.echo,
            work=work,
        )
    except MineError as exc:
        raise fail(str(exc)) from None
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
        # mine() removes it once it has started; an argument it refuses ends before that.
        shutil.rmtree(work, ignore_errors=True)
    if as_json:
        typer.echo(report.model_dump_json())
        return
    table = Table(title=escape(f"rig task mine: {len(report.commits)} commits of {repo} into {loaded.name}"))
    for column in ("commit", "verdict", "task or reason"):
        table.add_column(column)
    for entry in report.commits:
        table.add_row(entry.commit[:10], entry.verdict, escape(entry.task or entry.reason))
    Console(width=160).print(table)
    lost = report.funnel.lost
    mined = len(report.commits) - sum(lost.values())
    skipped = ", ".join(f"{n} {verdict}" for verdict, n in lost.items())
    typer.echo(f"mined {mined}; skipped {sum(lost.values())}" + (f" ({skipped})" if skipped else ""))
    funnel = report.funnel.model_dump()
    parent = funnel.pop("at_parent")
    words = {**FUNNEL_WORDS, "applied": f"applied ({parent} at their parent)"}
    typer.echo("funnel: " + " > ".join(f"{funnel[stage]} {words[stage]}" for stage in FUNNEL_STAGES))
    if mined:
        typer.echo(
            f'next: rig calibrate --pack {pack}, then an experiment with pack = "{pack}" (docs/mining.md)'
        )

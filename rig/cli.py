"""The `rig` command line. Heavy imports stay inside the commands that need them."""

import os
from pathlib import Path
from typing import Annotated

import typer

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
    """Print rig's version."""
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
    tasks_dir: Annotated[Path | None, typer.Option(help="Tasks root (default: tasks/).")] = None,
    hidden_dir: Annotated[
        Path | None, typer.Option(help="Hidden tests root (default: hidden_tests/).")
    ] = None,
    fixture_dir: Annotated[Path | None, typer.Option(help="Fixture (default: fixtures/taskapp/).")] = None,
) -> None:
    """Prove the oracle: clean fixture passes, baselines and decoys fail, solutions pass."""
    import time

    from rig import paths
    from rig.calibrate import ItemResult, calibrate
    from rig.tasks import TaskError, load_tasks

    fixture = fixture_dir or paths.FIXTURE_DIR
    if not (fixture / "scripts" / "check.py").is_file():
        raise typer.BadParameter(f"{fixture} has no scripts/check.py; pass the taskapp fixture")
    try:
        tasks = load_tasks(tasks_dir or paths.TASKS_DIR, hidden_dir or paths.HIDDEN_TESTS_DIR, task)
    except TaskError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc

    def show(result: ItemResult) -> None:
        mark = "PASS" if result.passed else "FAIL"
        color = typer.colors.GREEN if result.passed else typer.colors.RED
        typer.echo(typer.style(f"[{mark}]", fg=color) + f" {result.name}: {result.reason}")

    start = time.monotonic()
    report = calibrate(tasks, fixture, workers, on_result=None if as_json else show)
    if as_json:
        typer.echo(report.model_dump_json())
    else:
        total = report.passed + report.failed
        verdict = "all PASS" if report.ok else f"{report.failed} FAIL"
        typer.echo(
            f"calibrate: {report.passed}/{total} passed, {verdict} "
            f"({len(tasks)} tasks, {workers} workers, {time.monotonic() - start:.1f}s)"
        )
    raise typer.Exit(0 if report.ok else 1)

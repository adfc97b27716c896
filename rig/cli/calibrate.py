"""`rig calibrate`: a pack's oracle, or (--harness) each harness against the mock model."""

import os
from pathlib import Path
from typing import Annotated

import typer

from rig.cli.common import fail, interruptible
from rig.cli.main import app


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
        Path | None,
        typer.Option(
            help="The task pack: a folder with pack.toml, or builtin:NAME (default: the built-in pack)."
        ),
    ] = None,
    tasks_dir: Annotated[Path | None, typer.Option(help="Tasks root instead of the pack's.")] = None,
    hidden_dir: Annotated[Path | None, typer.Option(help="Hidden tests root instead of the pack's.")] = None,
    harness: Annotated[
        str | None,
        typer.Option(help="Prove a real CLI against the mock model instead: a harness name, or all."),
    ] = None,
    tasks_only: Annotated[
        bool,
        typer.Option(
            "--tasks-only",
            help="With --harness: only each task's solution and nothing checks, not the provider "
            "faults, tool hang and silence after the final answer, which no pack changes.",
        ),
    ] = False,
) -> None:
    """Prove a pack's oracle (the clean fixture passes, baselines and decoys fail, solutions pass), or a
    harness."""
    import time

    from rig.calibrate.oracle import calibrate
    from rig.env.activate import activate
    from rig.env.uvtool import EnvError
    from rig.packs.manifest import PackError, load_pack, option_pack
    from rig.packs.pins import save_pins
    from rig.packs.tasks import TaskError, load_tasks
    from rig.schema import ItemResult

    if tasks_only and harness is None:
        raise fail("--tasks-only selects the checks of a harness; add --harness NAME (or all)")
    try:
        loaded = load_pack(option_pack(pack))
        tasks = load_tasks(loaded, task, tasks_dir, hidden_dir)
    except (PackError, TaskError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc

    try:
        with interruptible():
            # Built (or found in the cache) once, before the items run in parallel.
            activate(loaded, lambda line: typer.echo(line, err=True))
            if harness is not None:
                _calibrate_harnesses(harness, tasks, workers, as_json, tasks_only)
                return

            def show(result: ItemResult) -> None:
                mark = "PASS" if result.passed else "FAIL"
                color = typer.colors.GREEN if result.passed else typer.colors.RED
                typer.echo(typer.style(f"[{mark}]", fg=color) + f" {result.name}: {result.reason}")

            start = time.monotonic()
            report = calibrate(loaded, tasks, workers, on_result=None if as_json else show)
    except EnvError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except KeyboardInterrupt:
        # Whatever started it (a background job ignores Ctrl-C): nothing of it is saved.
        typer.echo("error: interrupted; the calibration stopped, no pins were saved", err=True)
        raise typer.Exit(130) from None
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


def _calibrate_harnesses(choice: str, tasks, workers: int, as_json: bool, tasks_only: bool) -> None:
    import json
    import time

    from harnesses.protocol import CliNotFound
    from harnesses.registry import calibrated_names
    from rig import paths
    from rig.calibrate.harness import calibrate_harnesses
    from rig.schema import HarnessCheck

    known = calibrated_names()
    names = list(known) if choice == "all" else [choice]
    if any(name not in known for name in names):
        raise fail(f"unknown harness {choice!r}; use one of {', '.join(known)} or all")

    def show(check: HarnessCheck) -> None:
        mark = "PASS" if check.passed else "FAIL"
        color = typer.colors.GREEN if check.passed else typer.colors.RED
        typer.echo(typer.style(f"[{mark}]", fg=color) + f" {check.harness} {check.name}: {check.reason}")

    start = time.monotonic()
    try:
        results = calibrate_harnesses(
            names, tasks, paths.REPO_ROOT, workers, on_result=None if as_json else show, tasks_only=tasks_only
        )
    except CliNotFound as exc:
        raise fail(str(exc)) from exc
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

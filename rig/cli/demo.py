"""`rig demo`: the offline AGENTS.md demo from wherever rig is installed, in any directory."""

from pathlib import Path
from typing import Annotated

import typer

from rig.cli.common import fail
from rig.cli.main import app

DEMO = "demo_agents_md"
DEMO_HARNESS = "pi"
# The report's comparison table: these header cells, then one row per metric and pair of arms.
COMPARISON_HEADER = ("metric", "B vs A", "effect", "95% CI", "test", "p", "p (Holm)")


@app.command()
def demo(
    results_root: Annotated[Path, typer.Option("--results-root", help="Where the demo's results go.")] = Path(
        "rig-results"
    ),
) -> None:
    """Prove the built-in pack (`rig calibrate`), run the offline AGENTS.md A/B (Pi against the
    mock model, a simulated agent that follows AGENTS.md more often), report it, and print each
    comparison as report.md states it. Installs the pinned Pi first if it is missing."""
    from harnesses.capabilities import cli_location
    from rig.paths import EXPERIMENTS_DIR

    experiment = EXPERIMENTS_DIR / f"{DEMO}.toml"
    if not experiment.is_file():
        raise fail(f"this rig ships no demo experiment ({experiment} is missing); reinstall rig")
    steps: list[list[str]] = []
    located = cli_location(DEMO_HARNESS)
    if located is None:
        typer.echo(f"{DEMO_HARNESS} is not installed: installing the pinned version with npm", err=True)
        steps.append(["harness", "install", DEMO_HARNESS])
    else:
        typer.echo(f"{DEMO_HARNESS}: {located[1]} ({located[0]})", err=True)
    root = ["--results-root", str(results_root)]
    steps += [["calibrate"], ["run", str(experiment), *root], ["report", str(experiment), *root]]
    for step in steps:
        typer.echo(f"$ rig {' '.join(step)}", err=True)
        code = _rig(step)
        if code != 0:
            raise typer.Exit(code)
    folder = results_root / DEMO
    for line in comparisons((folder / "report.md").read_text(encoding="utf-8")):
        typer.echo(line)
    typer.echo(f"results: {folder.resolve()}; the report: {(folder / 'report.md').resolve()}")


def _rig(args: list[str]) -> int:
    """Run `rig ARGS` as its own process group and wait for it; the exit code. Ctrl-C and SIGTERM
    reach it once, from here, and it stops itself as it would alone (its agents, its appends)."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "rig.cli", *args], start_new_session=True)

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    handlers = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return proc.wait()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def comparisons(report: str) -> list[str]:
    """Each comparison of a report.md, as its table states it: `metric, B vs A: effect CI, p = P
    (Holm P)`."""
    lines: list[str] = []
    header: list[str] | None = None
    for line in report.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if tuple(cells[: len(COMPARISON_HEADER)]) == COMPARISON_HEADER:
            header = cells
        elif header and len(cells) == len(header) and not set(cells[0]) <= set(":- "):
            row = dict(zip(header, cells, strict=True))
            lines.append(
                f"{row['metric']}, {row['B vs A'].replace('`', '')}: {row['effect']} {row['95% CI']}, "
                f"p = {row['p']} (Holm {row['p (Holm)']})"
            )
    return lines

"""`rig harness list`: every registered harness, its pinned CLI and what rig can measure on it."""

from typing import Annotated

import typer

from rig.cli.main import app

harness_app = typer.Typer(help="The harnesses: their CLIs and capabilities.", no_args_is_help=True)
app.add_typer(harness_app, name="harness")

GROUPS = ("factor", "budget", "usage", "compaction", "fault", "version")


@harness_app.command("list")
def harness_list(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print every capability with how or why not, as JSON.")
    ] = False,
) -> None:
    """One row per harness: its pinned version, where its CLI is, and the capabilities it has (a
    capability it lacks is left out here; `--json` and docs/reference/harnesses.md give the reason)."""
    import json

    from rich.console import Console
    from rich.table import Table

    from harnesses.capabilities import cli_location, table

    rows = table()
    if as_json:
        for name, row in rows.items():
            location = cli_location(name)
            row["cli"] = str(location) if location else None
        typer.echo(json.dumps(rows, indent=2))
        return
    view = Table(title="harnesses (rig harness list --json: the reasons for each missing capability)")
    for column in ("harness", "pinned", "cli", *GROUPS):
        view.add_column(column, overflow="fold")
    for name, row in rows.items():
        caps = row["capabilities"]
        assert isinstance(caps, list)
        location = cli_location(name)
        cells = [
            ", ".join(
                c["name"].removeprefix("run_budget.") for c in caps if c["group"] == group and c["supported"]
            )
            or "-"
            for group in GROUPS
        ]
        view.add_row(
            name,
            str(row["pinned"] or "-"),
            "installed" if location else ("missing" if row["pinned"] else "-"),
            *cells,
        )
    Console(width=200).print(view)

"""`rig doctor`: what protects a run on this machine."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    pass

from rig.cli.common import fail
from rig.cli.main import app


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

    from rig.packs.manifest import PackError, load_pack, option_pack
    from rig.run.doctor import diagnose

    try:
        protections = diagnose(load_pack(option_pack(pack)))
    except PackError as exc:
        raise fail(str(exc)) from exc
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

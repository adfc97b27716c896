"""The `rig` application: its callback and `rig version`; each command group registers on it."""

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    pass


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

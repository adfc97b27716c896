"""`rig harness list` (every registered harness, where its pinned CLI is and what rig can measure
on it) and `rig harness install` (the pinned CLIs, into the rig's cache)."""

from typing import Annotated

import typer

from rig.cli.common import fail
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
    """One row per harness: its pinned version, where the CLI a run uses is (checkout, cache, PATH,
    the $VARIABLE that points at it, or missing), and the capabilities it has (a capability it lacks
    is left out here; `--json` and docs/reference/harnesses.md give the reason)."""
    import json

    from rich.console import Console
    from rich.table import Table

    from harnesses.capabilities import cli_location, table

    rows = table()
    where: dict[str, str | None] = {}
    for name, row in rows.items():
        location = cli_location(name)
        where[name] = location[0] if location else ("missing" if row["pinned"] else None)
        row["cli"] = str(location[1]) if location else None
        row["cli_where"] = where[name]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    view = Table(title="harnesses (rig harness list --json: the reasons for each missing capability)")
    for column in ("harness", "pinned", "cli", *GROUPS):
        view.add_column(column, overflow="fold")
    for name, row in rows.items():
        caps = row["capabilities"]
        assert isinstance(caps, list)
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
            where[name] or "-",
            *cells,
        )
    Console(width=200).print(view)


@harness_app.command("install")
def harness_install(
    names: Annotated[
        list[str],
        typer.Argument(
            help="Harnesses whose CLI to install (pi, codex, ...), or all.",
            metavar="NAME",
            show_default=False,
        ),
    ],
    force: Annotated[
        bool, typer.Option("--force", help="Install again, even over a complete install.")
    ] = False,
) -> None:
    """Install harness CLIs, each at the exact version harnesses/node/package-lock.json pins, with npm
    into the rig's cache ($RIG_HARNESS_CACHE, else ~/.cache/rig/harnesses), once: a run uses them
    where no checkout holds them (docs/harnesses.md). Needs node and npm on PATH."""
    from harnesses.capabilities import cli_location, pinned_version
    from harnesses.protocol import CliNotFound
    from harnesses.registry import HarnessUnavailable, adapter_class, cli_names, install_cli

    known = cli_names()
    chosen = list(known) if names == ["all"] else list(dict.fromkeys(names))
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise fail(f"no harness CLI named {unknown[0]!r}; give one of {', '.join(known)}, or all")
    started: list[str] = []

    def notify(message: str) -> None:
        started.append(message)
        typer.echo(message, err=True)

    for name in chosen:
        started.clear()
        try:
            path = install_cli(name, force, notify)
        except HarnessUnavailable as exc:
            raise fail(str(exc)) from None
        except CliNotFound as exc:
            raise fail(str(exc), code=1) from None
        used = cli_location(name)
        # The checkout's copy or $VAR comes before the cache (harnesses.cli): say which one runs.
        first = "" if used is None or used[1] == path else f"; runs use the {used[0]} copy first: {used[1]}"
        done = "installed" if started else "already installed, nothing to do"
        typer.echo(f"{name} {pinned_version(adapter_class(name))}: {done}: {path}{first}")

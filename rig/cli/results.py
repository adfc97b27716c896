"""`rig report`, `rig export`, `rig view`: what an experiment's results say."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    pass

from rig.cli.common import ResultsOption, fail, interruptible, report_warnings, results_folder, store_errors
from rig.cli.main import app


@app.command()
def report(
    experiment: Annotated[
        Path,
        typer.Argument(
            help="The experiment config whose results to report, or a results folder (one `rig run` "
            "wrote, or `rig import`)."
        ),
    ],
    vs: Annotated[
        Path | None,
        typer.Option("--vs", help="Compare with another experiment (config or results folder), arm by arm."),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Output folder (default: the results folder).")] = None,
    fmt: Annotated[
        str,
        typer.Option("--format", help="md, html, or json (report.json alone: the comparisons, for scripts)."),
    ] = "md",
    allow_mixed_pins: Annotated[
        bool,
        typer.Option(
            help="Pool records whose pins differ (fixture, task or hidden-test hashes, harness version, "
            "model, rig version, python, ruff, pytest or toolchain hash)."
        ),
    ] = False,
    results_root: ResultsOption = None,
) -> None:
    """Write report.md (or .html), failures.md and figures: per-cell rates, comparisons with CIs; or
    report.json alone (`--format json`), the comparisons for scripts."""
    from rig.analysis import PoolingError
    from rig.packs.manifest import PackError
    from rig.report.report import FORMATS, build_report

    if fmt not in FORMATS:
        raise fail(f"unknown format {fmt!r}; use {', '.join(FORMATS)}")
    folders = [results_folder(experiment, results_root)]
    if vs is not None:
        folders.append(results_folder(vs, results_root))
    target = out or folders[0]
    try:
        with store_errors(), report_warnings():
            written = build_report(
                folders, target, vs=vs is not None, fmt=fmt, allow_mixed_pins=allow_mixed_pins
            )
    except (PoolingError, PackError, ValueError) as exc:
        raise fail(str(exc)) from exc
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
        raise fail(f"unknown format {fmt!r}; use {', '.join(FORMATS)}")
    folder = results_folder(experiment, results_root)
    target = out or folder / fmt
    # Transcripts hold raw tool output and working directories: redacted like the records.
    redactor = Redactor.for_machine(
        runs_root=default_runs_root(), repo_root=paths.REPO_ROOT, results_root=folder.parent
    )
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    try:
        with (
            store_errors(),
            Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar,
        ):
            task_id = bar.add_task("trajectories", total=None)
            exported = export_atif(
                folder, target, redactor, lambda done, total: bar.update(task_id, completed=done, total=total)
            )
    except ExportError as exc:
        raise fail(f"{exc}; nothing was written") from exc
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

    folders = [results_folder(experiment, results_root)]
    if vs is not None:
        folders.append(results_folder(vs, results_root))
    console = Console(stderr=True)
    columns = (TextColumn("pages"), BarColumn(), MofNCompleteColumn())
    try:
        with (
            store_errors(),
            report_warnings(),
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
        raise fail(str(exc)) from exc
    index = written / INDEX_PAGE
    typer.echo(str(index))
    if not serve:
        return
    root = serve_root(written, folders)
    try:
        server = make_server(root, port)
    except OSError as exc:
        raise fail(f"cannot serve on 127.0.0.1:{port}: {exc.strerror or exc}; choose another --port") from exc
    url = f"http://127.0.0.1:{server.server_address[1]}/{index.relative_to(root).as_posix()}"
    try:
        with interruptible():
            # Announced once Ctrl-C and SIGTERM are handled: whoever stops it on reading the line
            # (a background job, SIGINT ignored) is never ignored.
            typer.echo(f"serving {root} at {url} (Ctrl-C stops)")
            sys.stdout.flush()
            server.serve_forever()
    except KeyboardInterrupt:
        typer.echo("stopped")
    finally:
        server.server_close()

"""`rig env build`, `rig env show`, `rig env prune`: a pack's project environment ([environment])."""

from pathlib import Path
from typing import Annotated

import typer

from rig.cli.common import fail, interruptible
from rig.cli.main import app

env_app = typer.Typer(
    help="A pack's project environment: built once with uv into a cache, locked.",
    no_args_is_help=True,
)
app.add_typer(env_app, name="env")

PackArgument = Annotated[
    Path | None,
    typer.Argument(
        help="The task pack: a folder with pack.toml (relative to the current directory); "
        "default: the built-in pack."
    ),
]


def _load(path: Path | None):
    from rig.packs.manifest import PackError, load_pack, option_pack

    try:
        return load_pack(option_pack(path))
    except PackError as exc:
        raise fail(str(exc)) from None


@env_app.command("build")
def env_build(pack: PackArgument = None) -> None:
    """Build the pack's environment into the cache (`$RIG_ENV_DIR`, default ~/.cache/rig/envs), unless it
    is there already; the first build writes environment.lock.txt beside pack.toml."""
    from rig.env.build import build
    from rig.env.uvtool import EnvError

    loaded = _load(pack)
    try:
        with interruptible():
            result = build(loaded)
    except KeyboardInterrupt:
        # build() removes its half-built folder on the way out: the cache holds only whole builds.
        raise fail("interrupted; nothing half-built was kept; rerun to build", code=130) from None
    except EnvError as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(
            f"environment build: {exc.filename or ''}: {exc.strerror or exc}; fix that and rerun"
        ) from None
    if result.lock_written is not None:
        typer.echo(f"wrote {result.lock_written}: the resolved, hashed lock; keep it with the pack")
    state = f"built in {result.manifest.seconds:.1f}s" if result.built else "cached"
    typer.echo(f"{state}: {result.path} ({len(result.manifest.packages)} packages; log: {result.log})")


@env_app.command("show")
def env_show(
    pack: PackArgument = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead.")] = False,
) -> None:
    """The pack's environment: its hash, path, size and installed packages (`uv pip freeze`)."""
    import json

    from rig.env.cache import show
    from rig.env.uvtool import EnvError

    try:
        info = show(_load(pack))
    except EnvError as exc:
        raise fail(str(exc)) from None
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "hash": info.hash,
                    "path": str(info.path),
                    "built": info.manifest is not None,
                    "size_bytes": info.size_bytes,
                    "packages": info.packages,
                    "log": str(info.log),
                }
            )
        )
        return
    typer.echo(f"hash: {info.hash}\npath: {info.path}")
    if info.manifest is None:
        typer.echo("not built: run `rig env build`")
        raise typer.Exit(1)
    manifest = info.manifest
    if manifest.node is not None:
        typer.echo(f"{manifest.manager} environment, node {manifest.node_version} ({manifest.node})")
    else:
        typer.echo(f"python: {manifest.python_version} ({manifest.python}), {manifest.platform}")
    typer.echo(f"size: {info.size_bytes / 1e6:.1f} MB\nbuilt: {info.manifest.built_at}\nlog: {info.log}")
    typer.echo("packages:\n" + "\n".join(f"  {line}" for line in info.packages))


@env_app.command("prune")
def env_prune(
    keep: Annotated[
        int, typer.Option(min=0, help="How many of the most recently built environments to keep.")
    ] = 3,
) -> None:
    """Remove all but the newest KEEP environments of the cache, and any half-built one; one being built
    is left alone. A pruned environment is rebuilt by the next `rig env build`."""
    from rig.env.cache import prune

    removed = prune(keep)
    for path in removed:
        typer.echo(f"removed {path}")
    typer.echo(f"{len(removed)} environment(s) removed")

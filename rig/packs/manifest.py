"""Loading task packs: a folder with pack.toml, validated into rig.schema.Pack.

The engine learns everything about a project from its pack: the fixture, the tasks and their
hidden tests, the gate, the hidden-test runner, the protected paths and what counts as docs. The
built-in pack is described by the pack.toml at the root of the rig's repository.
"""

import hashlib
from pathlib import Path

from pydantic import ValidationError

from rig.packs.tomlfile import first_error, read_toml
from rig.paths import REPO_ROOT
from rig.schema import Pack, PackSpec
from rig.workspace.build import tree_digest

MANIFEST = "pack.toml"
BUILTIN_PACK = REPO_ROOT


class PackError(Exception):
    """A pack that cannot be used; the message names the file and the fix."""


def manifest_path(path: Path) -> Path:
    """The pack.toml of `path` (a pack folder or the manifest itself)."""
    return path if path.name == MANIFEST or path.suffix == ".toml" else path / MANIFEST


def load_pack(path: Path | str | None = None) -> Pack:
    """Load and validate the pack at `path` (a folder or its pack.toml); None: the built-in pack.

    A relative path is taken relative to the rig's repository, where experiments name their packs.
    Raises PackError with a one-line reason.
    """
    folder = BUILTIN_PACK if path is None else Path(path).expanduser()
    if not folder.is_absolute():
        folder = REPO_ROOT / folder
    manifest = manifest_path(folder)
    if not manifest.is_file():
        raise PackError(
            f"{manifest}: no pack manifest; give a pack folder with a pack.toml (see docs/packs.md)"
        )
    data = read_toml(manifest, PackError)
    try:
        spec = PackSpec.model_validate(data)
    except ValidationError as exc:
        where, message = first_error(exc)
        raise PackError(f"{manifest}: {where}: {message}; fix the manifest") from None
    pack = Pack(spec=spec, root=manifest.parent.resolve())
    for label, where in (
        ("fixture", pack.fixture_dir),
        ("tasks", pack.tasks_dir),
        ("hidden_tests", pack.hidden_dir),
    ):
        if not where.is_dir():
            raise PackError(
                f"{manifest}: {label} = {where.relative_to(pack.root)!s} is not a folder; "
                "create it or fix the path"
            )
    for script in spec.gate.scripts:
        if not (pack.fixture_dir / script).is_file():
            raise PackError(f"{manifest}: gate.scripts: {script} is not a file of the fixture; fix the path")
    return pack


def pack_digest(pack: Pack, skip_caches: bool = True) -> str:
    """A hash of what a pack measures with: its manifest, fixture, tasks and hidden tests (a task's
    base is pinned by the tree hash its task.toml names)."""
    h = hashlib.sha256(manifest_path(pack.root).read_bytes())
    for folder in (pack.plain.fixture_dir, pack.tasks_dir, pack.hidden_dir):
        h.update(tree_digest(folder, skip_caches=skip_caches).encode())
    return h.hexdigest()

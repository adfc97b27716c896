"""Loading task packs: a folder with pack.toml, validated into rig.schema.Pack.

The engine learns everything about a project from its pack: the fixture, the tasks and their
hidden tests, the gate, the hidden-test runner, the protected paths and what counts as docs. The
built-in pack is described by the pack.toml at the root of the rig's repository.
"""

import hashlib
from pathlib import Path

from pydantic import ValidationError

from rig.packs.tomlfile import first_error, read_toml
from rig.paths import BUILTIN_PREFIX, PACKS_DIR, REPO_ROOT, local, named_in
from rig.schema import Pack, PackSpec
from rig.workspace.build import tree_digest

MANIFEST = "pack.toml"
BUILTIN_PACK = REPO_ROOT


class PackError(Exception):
    """A pack that cannot be used; the message names the file and the fix."""


def manifest_path(path: Path) -> Path:
    """The pack.toml of `path` (a pack folder or the manifest itself)."""
    return path if path.name == MANIFEST or path.suffix == ".toml" else path / MANIFEST


def builtin_packs() -> dict[str, Path]:
    """The packs shipped with the rig by the name in their pack.toml: the built-in pack, then each
    pack of the rig's packs/ folder."""
    shipped: dict[str, Path] = {}
    for folder in [BUILTIN_PACK, *sorted(m.parent for m in PACKS_DIR.glob(f"*/{MANIFEST}"))]:
        try:
            name = read_toml(folder / MANIFEST, PackError).get("name")
        except PackError:
            continue  # an unreadable manifest is refused, naming the fix, when its folder is loaded
        if isinstance(name, str):
            shipped.setdefault(name, folder)
    return shipped


def builtin_pack(reference: str) -> Path | None:
    """The folder of the shipped pack named `builtin:NAME`; None for any other reference."""
    if not reference.startswith(BUILTIN_PREFIX):
        return None
    shipped = builtin_packs()
    name = reference.removeprefix(BUILTIN_PREFIX)
    if name not in shipped:
        raise PackError(f"no built-in pack {reference!r}; use one of {_choices(shipped)}, or a pack folder")
    return shipped[name]


def _choices(shipped: dict[str, Path]) -> str:
    return ", ".join(BUILTIN_PREFIX + name for name in shipped)


def option_pack(option: Path | None) -> Path | str | None:
    """A command's --pack as `load_pack` takes it: `builtin:NAME` as given, a path from the current
    folder."""
    if option is None:
        return None
    return str(option) if str(option).startswith(BUILTIN_PREFIX) else option.resolve()


def experiment_pack(reference: str | None, base: Path) -> str | None:
    """The pack an experiment file in `base` names, as a reference `load_pack` reads anywhere.

    None and `builtin:NAME` stay as they are; a path is found as `rig.paths.named_in` finds it
    (relative to the experiment file, else under the rig's files). Raises PackError naming the
    choices.
    """
    if reference is None or builtin_pack(reference) is not None:
        return reference
    found = named_in(reference, base)
    if found is None:
        raise PackError(
            f"no pack folder {base / Path(reference).expanduser()}; give a folder relative to the "
            f"experiment file, an absolute path, or one of {_choices(builtin_packs())}"
        )
    return found


def load_pack(path: Path | str | None = None) -> Pack:
    """Load and validate the pack at `path` (a folder or its pack.toml, or `builtin:NAME`); None: the
    built-in pack.

    A relative path is taken relative to the rig's files (`rig.paths.local`): `experiment_pack`
    leaves relative only the paths that are. Raises PackError with a one-line reason.
    """
    shipped = builtin_pack(path) if isinstance(path, str) else None
    folder = shipped or (BUILTIN_PACK if path is None else local(str(path)))
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

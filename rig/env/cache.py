"""What the environment cache holds: one pack's environment (`rig env show`), and pruning all but
the newest environments (`rig env prune`)."""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from rig.env.build import cache_root, check_lock, identify, packages_now, read_manifest
from rig.env.identity import lock_path
from rig.env.node import TOOLS_DIR
from rig.env.uvtool import EnvError
from rig.schema import BuiltEnvironment, Pack


@dataclass(frozen=True)
class EnvironmentInfo:
    """A pack's environment as the cache has it: built (with its manifest) or not yet."""

    hash: str
    path: Path
    log: Path
    manifest: BuiltEnvironment | None
    size_bytes: int
    packages: list[str]


def tree_size(path: Path) -> int:
    """The bytes of the files below `path`, links not followed."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(folder) / name).lstat().st_size
            except OSError:
                continue
    return total


def show(pack: Pack) -> EnvironmentInfo:
    """The pack's environment: its hash and path, and if built its size and installed packages."""
    if pack.spec.environment is None:
        raise EnvError(f"{pack.root / 'pack.toml'}: no [environment]; add one (docs/environments.md)")
    lock = lock_path(pack)
    if lock is not None and not lock.is_file():
        raise EnvError(f"environment lock: {lock} does not exist yet; run `rig env build {pack.root}`")
    check_lock(pack)
    digest = identify(pack).hash
    root = cache_root()
    path, log = root / digest, root / f"{digest}.log"
    manifest = read_manifest(path)
    if manifest is None:
        return EnvironmentInfo(digest, path, log, None, 0, [])
    return EnvironmentInfo(digest, path, log, manifest, tree_size(path), packages_now(path, manifest, log))


def prune(keep: int) -> list[Path]:
    """Remove every environment but the `keep` most recently built, and every half-built one;
    an environment being built (its lock held) is left alone. The paths removed."""
    root = cache_root()
    if not root.is_dir():
        return []
    complete: list[tuple[str, Path]] = []
    broken: list[Path] = []
    for path in root.iterdir():
        if not path.is_dir() or path.name == TOOLS_DIR:
            continue
        manifest = read_manifest(path)
        if manifest is None:
            broken.append(path)
        else:
            complete.append((manifest.built_at, path))
    complete.sort(reverse=True)
    removed: list[Path] = []
    for path in broken + [path for _, path in complete[keep:]]:
        try:
            with FileLock(root / f"{path.name}.lock", timeout=0):
                shutil.rmtree(path)
                (root / f"{path.name}.log").unlink(missing_ok=True)
        except Timeout:
            continue
        removed.append(path)
    return removed

"""Protected files: hashed before the agent runs, compared and restored byte for byte after.

Tampering is recorded, never silently forgiven: the verification that decides success always
runs against the pristine gate, tests and pytest configuration.
"""

import hashlib
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field

PROTECTED_FILES = ("scripts/check.py", "scripts/gen_models.py", "pyproject.toml")
PROTECTED_DIRS = ("taskapp_testing", "tests")
# Files that change how Python or pytest behave wherever they appear.
PROTECTED_NAMES = (
    "conftest.py",
    "pytest.ini",
    "setup.cfg",
    "tox.ini",
    "sitecustomize.py",
    "usercustomize.py",
)
PROTECTED_SUFFIXES = (".pth",)
CACHE_DIRS = ("__pycache__", ".pytest_cache")
SKIP_DIRS = (".git",)


def is_protected(rel: str) -> bool:
    """Whether a workspace-relative POSIX path is protected."""
    path = PurePosixPath(rel)
    return (
        rel in PROTECTED_FILES
        or (len(path.parts) > 1 and path.parts[0] in PROTECTED_DIRS)
        or path.name in PROTECTED_NAMES
        or path.suffix in PROTECTED_SUFFIXES
    )


@dataclass
class Snapshot:
    """The protected files of a workspace before the agent ran: path -> (bytes, mode)."""

    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)

    def digest(self) -> str:
        h = hashlib.sha256()
        for rel in sorted(self.files):
            h.update(rel.encode() + b"\0" + hashlib.sha256(self.files[rel][0]).digest())
        return h.hexdigest()


class Tampering(BaseModel):
    modified: list[str] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)

    @property
    def touched(self) -> list[str]:
        return sorted({*self.modified, *self.added, *self.deleted})


def _walk(workdir: Path):
    """Every non-directory entry (files and symlinks, symlinked directories included), as rel paths."""
    for dirpath, dirnames, filenames in os.walk(workdir, followlinks=False):
        base = Path(dirpath)
        keep = []
        for name in dirnames:
            if (base / name).is_symlink():
                filenames.append(name)
            elif name not in SKIP_DIRS:
                keep.append(name)
        dirnames[:] = keep
        for name in filenames:
            yield (base / name).relative_to(workdir).as_posix()


def _is_cache(rel: str) -> bool:
    return any(part in CACHE_DIRS for part in PurePosixPath(rel).parts)


def snapshot(workdir: Path) -> Snapshot:
    """Read every protected file of the prepared workspace."""
    snap = Snapshot()
    for rel in _walk(workdir):
        path = workdir / rel
        if is_protected(rel) and not _is_cache(rel) and not path.is_symlink():
            snap.files[rel] = (path.read_bytes(), stat.S_IMODE(path.lstat().st_mode))
    return snap


def _intact(workdir: Path, rel: str, content: bytes) -> bool | None:
    """True if unchanged, False if changed, None if gone; every parent must be a real directory."""
    current = workdir
    for part in PurePosixPath(rel).parts[:-1]:
        current = current / part
        try:
            mode = current.lstat().st_mode
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(mode):
            return False
    path = workdir / rel
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(mode):
        return False
    return path.read_bytes() == content


def compare(snap: Snapshot, workdir: Path) -> Tampering:
    """What the agent did to protected files: modified, added and deleted paths."""
    result = Tampering()
    for rel, (content, _mode) in sorted(snap.files.items()):
        state = _intact(workdir, rel, content)
        if state is None:
            result.deleted.append(rel)
        elif state is False:
            result.modified.append(rel)
    result.added = sorted(
        rel for rel in _walk(workdir) if is_protected(rel) and rel not in snap.files and not _is_cache(rel)
    )
    return result


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _real_parents(workdir: Path, rel: str) -> None:
    """Make every parent of rel a real directory, replacing symlinks or files in the way."""
    current = workdir
    for part in PurePosixPath(rel).parts[:-1]:
        current = current / part
        if current.is_symlink() or (current.exists() and not current.is_dir()):
            _remove(current)
        current.mkdir(exist_ok=True)


def restore(snap: Snapshot, workdir: Path, tampering: Tampering) -> None:
    """Put every protected file back byte for byte, remove added ones and bytecode caches."""
    for rel in tampering.added:
        path = workdir / rel
        if path.is_symlink() or path.exists():
            _remove(path)
    for rel in (*tampering.modified, *tampering.deleted):
        _real_parents(workdir, rel)
        path = workdir / rel
        _remove(path)
        content, mode = snap.files[rel]
        path.write_bytes(content)
        path.chmod(mode)
    # A planted .pyc next to a test module would run instead of the restored source.
    for top in PROTECTED_DIRS:
        root = workdir / top
        if root.is_dir() and not root.is_symlink():
            for cache in [p for p in root.rglob("__pycache__") if p.is_dir()]:
                shutil.rmtree(cache, ignore_errors=True)

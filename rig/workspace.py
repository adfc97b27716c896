"""Building a workspace: a cache-free copy of the fixture with patches applied."""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

CACHE_NAMES = ("__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", "*.pyc", "*.egg-info")


class PatchError(Exception):
    """A patch that does not apply to the workspace."""


def copy_fixture(fixture: Path, dest: Path) -> Path:
    """Copy the fixture to `dest` (which must not exist), leaving caches behind."""
    shutil.copytree(fixture, dest, ignore=shutil.ignore_patterns(*CACHE_NAMES), symlinks=True)
    return dest


def apply_patch(workdir: Path, patch: Path) -> None:
    """Apply a git-style patch to `workdir`; an empty patch is a no-op."""
    if patch.stat().st_size == 0:
        return
    # The ceiling keeps git from treating an enclosing repository as the patch's root.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(workdir.parent)}
    proc = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", str(patch.resolve())],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["unknown error"])[0]
        raise PatchError(f"{patch}: does not apply ({first}); regenerate it against the fixture")


def tree_digest(root: Path, *, skip_caches: bool = True) -> str:
    """sha256 over every file's relative path and bytes, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if skip_caches and any(part in ("__pycache__", ".pytest_cache", ".ruff_cache") for part in rel.parts):
            continue
        if path.is_symlink():
            digest.update(f"L {rel.as_posix()} {os.readlink(path)}\n".encode())
        elif path.is_file():
            digest.update(f"F {rel.as_posix()}\n".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()

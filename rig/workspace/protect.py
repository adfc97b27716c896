"""Protected files: hashed before the agent runs, compared and restored byte for byte after.

Tampering is recorded, never silently forgiven: the verification that decides success always
runs against the pristine gate, tests and runner configuration. What is protected comes from the
pack (its gate, tests and [protect] paths) and its runner kind (its module in rig.runners), wherever an agent
adds them: for pytest, files that change how Python or pytest start (conftest.py, .pth,
sitecustomize.py), modules without source (a .pyc outside __pycache__, an extension module) and
modules that would shadow the stdlib or an installed package where the gate looks first; for
node, package.json, .npmrc and node_modules/. Bytecode caches are not tampering but are removed
all the same.
"""

import hashlib
import os
import pkgutil
import site
import stat
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from functools import cache
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path, PurePosixPath

from rig.confine.untrusted import read_bounded, remove, walk
from rig.env.identity import source_roots
from rig.runners.registry import kind_of
from rig.schema import Pack, Tampering

# Modules Python imports without any source: a sourceless foo.pyc next to where foo.py would be
# (bytecode inside __pycache__ is removed by restore and ignored by verification instead), and
# compiled extensions, which are even preferred to a foo.py beside them.
MODULE_BINARY_SUFFIXES = (".pyc", *EXTENSION_SUFFIXES)
CACHE_DIRS = ("__pycache__", ".pytest_cache")
SKIP_DIRS = (".git",)


@dataclass(frozen=True)
class Rules:
    """What is protected in one pack's workspaces: its own paths and its runner kind's."""

    files: frozenset[str] = frozenset()
    dirs: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    """Glob patterns matched against every component of a path."""
    python: bool = False
    """Sourceless modules and shadowing modules (below `shadow_roots`) are protected too."""
    shadow_roots: tuple[tuple[str, ...], ...] = ()
    own_names: frozenset[str] = frozenset()
    """The project's own top-level modules, which never shadow: in a project environment the
    project may share a name with a package installed with the rig (iniconfig, which pytest needs)."""

    def describe(self) -> str:
        """The protected paths in one line, for `rig doctor`."""
        parts = [*sorted(self.files), *(f"{d}/" for d in self.dirs), *self.names]
        if self.python:
            parts.append("sourceless and shadowing modules")
        return ", ".join(parts)


def rules_for(pack: Pack) -> Rules:
    """The protection of `pack`: its [protect] paths plus what its runner kind protects; with a
    project environment, its source roots are shadow roots (they go first on the module path)."""
    kind = kind_of(pack.spec.runner.kind)
    spec = pack.spec.protect
    roots = list(spec.shadow_roots)
    if pack.spec.environment is not None:
        roots += [root for root in source_roots(pack.fixture_dir) if root not in roots]
    return Rules(
        files=frozenset(spec.files),
        dirs=tuple(spec.dirs),
        names=(*kind.protected_names, *spec.names),
        python=kind.python,
        shadow_roots=tuple(PurePosixPath(root).parts for root in roots),
        own_names=_own_names(pack.fixture_dir, roots) if pack.spec.environment is not None else frozenset(),
    )


def _own_names(fixture: Path, roots: list[str]) -> frozenset[str]:
    """The top-level module names the pristine fixture has in its source roots."""
    names = set()
    for root in roots:
        folder = fixture / root
        if folder.is_dir():
            names |= {e.name.removesuffix(".py") for e in folder.iterdir() if e.is_dir() or e.suffix == ".py"}
    return frozenset(names)


@cache
def shadowable_names() -> frozenset[str]:
    """Top-level module names the rig's interpreter provides: the stdlib and its site-packages."""
    paths = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")} | set(site.getsitepackages())
    installed = {module.name for module in pkgutil.iter_modules(sorted(paths))}
    return frozenset(sys.stdlib_module_names) | frozenset(sys.builtin_module_names) | installed


def _shadows(parts: tuple[str, ...], roots: tuple[tuple[str, ...], ...], own: frozenset[str]) -> bool:
    """Whether a path puts a module named like a stdlib or installed one, not one of the project's
    `own`, where it would win."""
    for root in roots:
        if len(parts) > len(root) and parts[: len(root)] == root:
            # The first component below the root: a module file or a package directory.
            name = parts[len(root)].removesuffix(".py")
            if name in shadowable_names() and name not in own:
                return True
    return False


def is_protected(rel: str, rules: Rules) -> bool:
    """Whether a workspace-relative POSIX path is protected under `rules`."""
    path = PurePosixPath(rel)
    return (
        rel in rules.files
        or (len(path.parts) > 1 and path.parts[0] in rules.dirs)
        or any(fnmatchcase(part, name) for part in path.parts for name in rules.names)
        or (
            rules.python
            and (
                (path.name.endswith(MODULE_BINARY_SUFFIXES) and "__pycache__" not in path.parts)
                or _shadows(path.parts, rules.shadow_roots, rules.own_names)
            )
        )
    )


@dataclass
class Snapshot:
    """The protected files of a workspace before the agent ran: path -> (bytes, mode), and the
    rules that chose them (which compare and restore apply too)."""

    rules: Rules
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)

    def digest(self) -> str:
        h = hashlib.sha256()
        for rel in sorted(self.files):
            h.update(rel.encode() + b"\0" + hashlib.sha256(self.files[rel][0]).digest())
        return h.hexdigest()


def _walk(workdir: Path) -> Iterator[str]:
    """Every non-directory entry (files, symlinks, symlinked directories), as relative paths."""
    for rel, _st in walk(workdir, skip=SKIP_DIRS):
        yield rel


def _is_cache(rel: str) -> bool:
    """Whether a path lies in a bytecode or pytest cache, which is never recorded as tampering."""
    return any(part in CACHE_DIRS for part in PurePosixPath(rel).parts)


def snapshot(workdir: Path, rules: Rules) -> Snapshot:
    """Read every file of the prepared workspace that `rules` protect."""
    snap = Snapshot(rules)
    for rel, st in walk(workdir, skip=SKIP_DIRS):
        if is_protected(rel, rules) and not _is_cache(rel) and stat.S_ISREG(st.st_mode):
            content = read_bounded(workdir / rel, st.st_size)
            if content is not None:
                snap.files[rel] = (content, stat.S_IMODE(st.st_mode))
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
    # One byte more than the original: a longer file differs, however long it is.
    return read_bounded(path, len(content) + 1) == content


def compare(
    snap: Snapshot, workdir: Path, paths: Iterable[str] | None = None, left_out: Iterable[str] = ()
) -> Tampering:
    """What the agent did to protected files: modified, added and deleted paths.

    `paths`, every file and symlink of `workdir` when the caller already knows them (it copied
    the tree), spares a walk of it. `left_out` names the build and cache trees the copy did not
    take (rig.confine.untrusted.copy_tree): one the pack protects by name or place (a planted
    node_modules/) is added tampering too, under its own path, though it never reaches verification.
    """
    result = Tampering()
    for rel, (content, _mode) in sorted(snap.files.items()):
        state = _intact(workdir, rel, content)
        if state is None:
            result.deleted.append(rel)
        elif state is False:
            result.modified.append(rel)
    added = [
        rel
        for rel in (_walk(workdir) if paths is None else paths)
        if is_protected(rel, snap.rules) and rel not in snap.files and not _is_cache(rel)
    ]
    # Never imported, a left-out tree shadows nothing: Python's sourceless and shadowing rules would
    # only call an honest agent's venv/ (a stdlib name) tampering.
    by_place = replace(snap.rules, python=False)
    baseline_dirs = {parent.as_posix() for rel in snap.files for parent in PurePosixPath(rel).parents}
    added += [
        rel
        for rel in left_out
        if is_protected(rel, by_place) and rel not in baseline_dirs and not _is_cache(rel)
    ]
    result.added = sorted(added)
    return result


def real_parents(workdir: Path, rel: str) -> None:
    """Make every parent of rel a real directory, replacing symlinks or files in the way."""
    current = workdir
    for part in PurePosixPath(rel).parts[:-1]:
        current = current / part
        if os.path.lexists(current) and not stat.S_ISDIR(current.lstat().st_mode):
            remove(current)
        current.mkdir(exist_ok=True)


def _prune_empty_parents(workdir: Path, rel: str) -> None:
    """Remove the directories above rel that are now empty.

    An empty pytest/ left at the root still changes tools: ruff's isort then takes pytest for a
    first-party module and reports the fixture's own imports as unsorted.
    """
    for parent in PurePosixPath(rel).parents:
        if parent == PurePosixPath("."):
            return
        path = workdir / parent
        if path.is_symlink() or not path.is_dir() or any(path.iterdir()):
            return
        path.rmdir()


def restore(snap: Snapshot, workdir: Path, tampering: Tampering, caches: bool = True) -> None:
    """Put every protected file back byte for byte, remove added ones and bytecode caches.

    `caches=False` skips the walk for bytecode caches, for a tree known to hold none.
    """
    for rel in tampering.added:
        remove(workdir / rel)
        _prune_empty_parents(workdir, rel)
    for rel in (*tampering.modified, *tampering.deleted):
        real_parents(workdir, rel)
        path = workdir / rel
        # Whatever is there (a FIFO, a link to a device, a directory) goes before the file is written.
        remove(path)
        content, mode = snap.files[rel]
        path.write_bytes(content)
        path.chmod(mode)
    # A planted .pyc would run instead of the restored or edited source (verification also
    # ignores __pycache__ through PYTHONPYCACHEPREFIX; this keeps the workspace honest too).
    if caches:
        for pycache in list(_bytecode_caches(workdir)):
            remove(pycache)


def _bytecode_caches(workdir: Path) -> Iterator[Path]:
    """Every entry named __pycache__ (directory, file or symlink), without following symlinks."""
    for rel, _st in walk(workdir, skip=(*SKIP_DIRS, "__pycache__"), dirs=True):
        if PurePosixPath(rel).name == "__pycache__":
            yield workdir / rel

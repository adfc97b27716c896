"""Trees an agent wrote: read, copied and removed as hostile input.

Whatever an agent leaves may be a FIFO where a source file was, a symlink to /dev/zero or out of
the workspace, a directory chain thousands of levels deep, a million files, or a process still
writing. Everything here works on directory file descriptors (no path is resolved twice, so a
link swapped in mid-walk is never followed), checks each entry's type before touching it, opens
files with O_NOFOLLOW | O_NONBLOCK and copies at most the size it saw, walks with an explicit
stack instead of recursion, and stops at the bounds it is given: a number of entries, a depth and
a deadline. Past a bound it raises LimitExceeded with what it counted so far, having spent time
proportional to the bound, not to the tree.
"""

import fnmatch
import os
import re
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

# Build and cache trees: counted (they count towards the limits) but never copied or diffed. A
# dependency install (node_modules, a virtualenv) would otherwise cost more than the agent's work.
# `.git` is the agent's own history (the rig diffs against its private copy of the baseline).
EXCLUDED_NAMES = (
    ".git",
    "node_modules",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    "*.egg-info",
)
DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_MAX_DEPTH = 64
DEFAULT_MAX_SECONDS = 120.0
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_COPY_CHUNK = 8 * 1024 * 1024
# How long removing a workspace may take: GNU rm walks any depth without recursion limits.
REMOVE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Bounds:
    """How far a walk may go: entries (files, links, special files and directories), depth, time."""

    max_entries: int = DEFAULT_MAX_ENTRIES
    max_depth: int = DEFAULT_MAX_DEPTH
    max_seconds: float = DEFAULT_MAX_SECONDS


@dataclass
class TreeStats:
    """What a walk found; paths are relative to the root, POSIX style."""

    files: int = 0
    dirs: int = 0
    depth: int = 0
    excluded: dict[str, int] = field(default_factory=dict)
    special: list[str] = field(default_factory=list)
    outward_links: list[str] = field(default_factory=list)

    @property
    def entries(self) -> int:
        return self.files + self.dirs


class LimitExceeded(Exception):
    """A tree past its bounds; `stats` holds what was counted until the walk stopped."""

    def __init__(self, what: str, stats: TreeStats) -> None:
        super().__init__(what)
        self.what = what
        self.stats = stats


def name_matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """A test of a name against shell patterns, compiled once: it runs for every entry of a tree."""
    match = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns)).match
    return lambda name: match(name) is not None


is_excluded = name_matcher(EXCLUDED_NAMES)
"""Whether a directory entry's name marks a build or cache tree (EXCLUDED_NAMES)."""


class _Walk:
    """The shared bookkeeping of one bounded walk: counts, depth, deadline."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self.stats = TreeStats()
        self.deadline = time.monotonic() + bounds.max_seconds

    def count(self, is_dir: bool, depth: int) -> None:
        stats = self.stats
        if is_dir:
            stats.dirs += 1
            stats.depth = max(stats.depth, depth)
            if depth > self.bounds.max_depth:
                raise LimitExceeded(
                    f"directory depth over {self.bounds.max_depth} (the [limits] max_depth)", stats
                )
        else:
            stats.files += 1
        if stats.entries > self.bounds.max_entries:
            raise LimitExceeded(
                f"over {self.bounds.max_entries} files and directories (the [limits] max_files)", stats
            )
        # A clock read per entry costs little next to the stat that found it.
        if time.monotonic() > self.deadline:
            raise LimitExceeded(
                f"walking took over {self.bounds.max_seconds:g}s after {stats.entries} entries", stats
            )


def _entries(dir_fd: int) -> Iterator[os.DirEntry]:
    """The entries of an open directory, lazily: a directory of a million names is never listed whole."""
    with os.scandir(dir_fd) as it:
        yield from it


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _stays_inside(rel_dir: str, target: str) -> bool:
    """Whether a relative link target, taken from the link's directory, names a path in the tree."""
    if not target or target.startswith("/"):
        return False
    depth = len(rel_dir.split("/")) if rel_dir else 0
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part not in ("", "."):
            depth += 1
    return True


def _descend(
    top: int, skip: Callable[[str], bool] = lambda _name: False
) -> Iterator[tuple[str, os.DirEntry, int]]:
    """(relative path, entry, depth) of every entry below the open directory `top`, which it closes.

    Depth-first with an explicit stack of directory descriptors: no recursion, no path resolved
    twice, no link followed; directories whose name `skip` accepts are yielded but not entered.
    """
    stack = [(top, "", 0, _entries(top))]
    try:
        while stack:
            fd, rel_dir, depth, it = stack[-1]
            entry = next(it, None)
            if entry is None:
                stack.pop()
                os.close(fd)
                continue
            rel = _join(rel_dir, entry.name)
            yield rel, entry, depth + 1
            if entry.is_dir(follow_symlinks=False) and not skip(entry.name):
                try:
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                stack.append((child, rel, depth + 1, _entries(child)))
    finally:
        for fd, _rel, _depth, _it in stack:
            os.close(fd)


def _count_excluded(walk: _Walk, dir_fd: int, name: str, depth: int) -> int:
    """Count everything below an excluded directory (never copied); how many entries."""
    before = walk.stats.entries
    try:
        top = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return 0
    with closing(_descend(top)) as entries:
        for _rel, entry, level in entries:
            walk.count(entry.is_dir(follow_symlinks=False), depth + level)
    return walk.stats.entries - before


def _count_under(stats: TreeStats, name: str, entries: int) -> None:
    """Add `entries` to the count of the EXCLUDED_NAMES pattern that `name` matches."""
    key = next(p for p in EXCLUDED_NAMES if fnmatch.fnmatchcase(name, p))
    stats.excluded[key] = stats.excluded.get(key, 0) + entries


def _copy_file(src_dir: int, dst_dir: int, name: str, st: os.stat_result) -> int | None:
    """Copy one regular file, at most the size seen; None if it is not a regular file after all."""
    src = os.open(name, _FILE_FLAGS, dir_fd=src_dir)
    try:
        now = os.fstat(src)
        if not stat.S_ISREG(now.st_mode) or now.st_ino != st.st_ino:
            return None
        dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dst_dir)
        try:
            left = now.st_size
            while left > 0:
                try:
                    done = os.copy_file_range(src, dst, min(left, _COPY_CHUNK))
                except OSError:
                    data = os.read(src, min(left, _COPY_CHUNK))
                    done = len(data)
                    os.write(dst, data)
                if done == 0:
                    break
                left -= done
            os.fchmod(dst, stat.S_IMODE(now.st_mode) & 0o777)
        finally:
            os.close(dst)
        return now.st_size - left
    finally:
        os.close(src)


def copy_tree(src: Path, dest: Path, bounds: Bounds = Bounds()) -> TreeStats:
    """Copy an agent-written tree to `dest` (created here): directories, regular files, inner links.

    Left out and reported: FIFOs, sockets and devices (`special`), symlinks whose target is
    absolute or leaves the tree (`outward_links`), and the build and cache trees of EXCLUDED_NAMES
    (counted in `excluded`). Raises LimitExceeded past `bounds`; `dest` then holds a partial copy.
    """
    walk = _Walk(bounds)
    stats = walk.stats
    src_fd = os.open(src, _DIR_FLAGS)
    try:
        os.mkdir(dest, 0o700)
        dst_fd = os.open(dest, _DIR_FLAGS)
    except OSError:
        os.close(src_fd)
        raise
    stack = [(src_fd, dst_fd, "", 0, _entries(src_fd))]
    try:
        while stack:
            s_fd, d_fd, rel_dir, depth, it = stack[-1]
            entry = next(it, None)
            if entry is None:
                stack.pop()
                os.close(s_fd)
                os.close(d_fd)
                continue
            name, rel = entry.name, _join(rel_dir, entry.name)
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                stats.special.append(rel)
                continue
            if stat.S_ISDIR(st.st_mode):
                if is_excluded(name):
                    walk.count(True, depth + 1)
                    below = _count_excluded(walk, s_fd, name, depth + 1)
                    _count_under(stats, name, 1 + below)
                    continue
                walk.count(True, depth + 1)
                try:
                    child_src = os.open(name, _DIR_FLAGS, dir_fd=s_fd)
                except OSError:
                    stats.special.append(rel)
                    continue
                os.mkdir(name, 0o755, dir_fd=d_fd)
                child_dst = os.open(name, _DIR_FLAGS, dir_fd=d_fd)
                stack.append((child_src, child_dst, rel, depth + 1, _entries(child_src)))
                continue
            walk.count(False, depth + 1)
            if is_excluded(name):
                # A `.git` file (a worktree pointer) or a stray cache file.
                _count_under(stats, name, 1)
            elif stat.S_ISLNK(st.st_mode):
                target = os.readlink(name, dir_fd=s_fd)
                if _stays_inside(rel_dir, target):
                    os.symlink(target, name, dir_fd=d_fd)
                else:
                    stats.outward_links.append(rel)
            elif stat.S_ISREG(st.st_mode):
                try:
                    copied = _copy_file(s_fd, d_fd, name, st)
                except OSError:
                    copied = None
                if copied is None:
                    stats.special.append(rel)
            else:
                stats.special.append(rel)
    finally:
        for s_fd, d_fd, _rel, _depth, _it in stack:
            os.close(s_fd)
            os.close(d_fd)
    return stats


def walk(
    root: Path, skip: tuple[str, ...] | Callable[[str], bool] = (".git",), dirs: bool = False
) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of every entry below `root`, without recursion; directories only if `dirs`.

    Directories named in `skip` (or whose name it accepts) are not entered, but yielded if `dirs`;
    symlinks (to directories too) are yielded, never followed. For trees the rig made itself (a
    copy_tree result), which are already bounded.
    """
    skips = skip if callable(skip) else skip.__contains__
    with closing(_descend(os.open(root, _DIR_FLAGS), skips)) as entries:
        for rel, entry, _depth in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if dirs or not stat.S_ISDIR(st.st_mode):
                yield rel, st


def remove(path: Path) -> None:
    """Remove whatever is at `path`: a file, a FIFO, a socket, a device node, a link (never its
    target) or a directory tree of any depth; nothing there is fine."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        remove_tree(path)
    else:
        os.unlink(path)


def remove_tree(path: Path, timeout: float = REMOVE_TIMEOUT_S) -> str | None:
    """Remove a directory tree the agent wrote, however deep or large; None, or why it could not.

    GNU rm walks with file descriptors (no recursion limit, no PATH_MAX), never follows links and
    stays on one file system; the timeout bounds a tree too large to remove in reasonable time.
    """
    try:
        proc = subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
        )
    except subprocess.TimeoutExpired:
        return f"removing {path} took over {timeout:g}s"
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or [f"rm exited {proc.returncode}"])[0]
    return None


def read_bounded(path: Path | str, max_bytes: int) -> bytes | None:
    """At most `max_bytes` of a regular file, never following a link or opening anything else."""
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], max_bytes
        while left > 0:
            data = os.read(fd, min(left, _COPY_CHUNK))
            if not data:
                break
            chunks.append(data)
            left -= len(data)
        return b"".join(chunks)
    finally:
        os.close(fd)

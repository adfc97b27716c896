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

import errno
import fnmatch
import os
import re
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rig.schema import DEFAULT_MAX_DEPTH, DEFAULT_MAX_ENTRIES

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
DEFAULT_MAX_SECONDS = 120.0
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_COPY_CHUNK = 8 * 1024 * 1024
# Threads creating the files of a copy on a disk, where file creation is system time spent
# outside the GIL; on a tmpfs creating a file is so cheap that passing the GIL costs more.
COPY_THREADS = max(1, min(4, os.cpu_count() or 1))
# What a file takes on a memory file system beyond its bytes: its last page, its inode and name.
_PAGE = 4096
_ENTRY_BYTES = 1024
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
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
    left_out: list[str] = field(default_factory=list)
    """The entries of `excluded`: each build or cache tree (or stray file) by its own path."""
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


class NoRoom(Exception):
    """A copy that did not fit: past the room it was given, or its file system full."""


class _Room:
    """The bytes a copy may still take, shared by the threads that write it."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.lock = threading.Lock()

    def take(self, size: int) -> bool:
        """Count one file of `size` bytes; whether it still fits."""
        cost = -(-size // _PAGE) * _PAGE + _ENTRY_BYTES
        with self.lock:
            self.left -= cost
            return self.left >= 0


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


class CopySink(Protocol):
    """Told of every regular file and inner link copy_tree writes, with the bytes it wrote.

    A sink lets one pass over the tree both copy and digest it: files up to `max_bytes` are read
    into memory once, written to the copy and handed over; larger ones are copied without being
    held in memory and handed over as None with their size.
    """

    max_bytes: int

    def file(self, rel: str, mode: int, data: bytes | None, size: int) -> None:
        """A regular file now in the copy: its mode, its content (None past max_bytes), its size."""

    def link(self, rel: str, target: str) -> None:
        """A symlink now in the copy, pointing inside the tree."""


def _read_exactly(fd: int, size: int) -> bytes:
    """At most `size` bytes of an open file (fewer if it shrank since it was seen)."""
    chunks, left = [], size
    while left > 0:
        data = os.read(fd, min(left, _COPY_CHUNK))
        if not data:
            break
        chunks.append(data)
        left -= len(data)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _copy_bytes(src: int, dst: int, size: int) -> int:
    """Copy at most `size` bytes between open files without holding them in memory; how many."""
    left = size
    while left > 0:
        try:
            done = os.copy_file_range(src, dst, min(left, _COPY_CHUNK))
        except OSError:
            data = os.read(src, min(left, _COPY_CHUNK))
            done = len(data)
            _write_all(dst, data)
        if done == 0:
            break
        left -= done
    return size - left


def _copy_file(
    src_dir: int, dst_dir: int, name: str, inode: int, max_bytes: int, room: _Room | None
) -> tuple[int, bytes | None, int] | None:
    """Copy one regular file, at most the size its descriptor shows: (mode, content if at most
    `max_bytes`, size). None if what opens is not the regular file the listing named; NoRoom,
    before writing anything, if it does not fit in `room`.
    """
    src = os.open(name, _FILE_FLAGS, dir_fd=src_dir)
    try:
        now = os.fstat(src)
        if not stat.S_ISREG(now.st_mode) or now.st_ino != inode:
            return None
        if room is not None and not room.take(now.st_size):
            raise NoRoom
        mode = stat.S_IMODE(now.st_mode) & 0o777
        dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dst_dir)
        try:
            if now.st_size <= max_bytes:
                data: bytes | None = _read_exactly(src, now.st_size)
                _write_all(dst, data)
                size = len(data)
            else:
                data, size = None, _copy_bytes(src, dst, now.st_size)
            os.fchmod(dst, mode)
        finally:
            os.close(dst)
        return mode, data, size
    finally:
        os.close(src)


class _Copier:
    """Regular files copied by worker threads, a batch of one directory's files at a time.

    Creating a file is most of what a copy costs; on a disk it is system time spent outside the
    GIL, so files of different batches are created side by side. Batches in flight are bounded
    (so are the descriptors and memory they hold), and the sink is fed under a lock. A file that
    does not fit (`room`, or a full file system) stops every batch and sets `full`.
    """

    BATCH = 256

    def __init__(self, sink: CopySink | None, threads: int, room: int | None) -> None:
        self.sink = sink
        self.room = _Room(room) if room is not None else None
        self.full = False
        self.max_bytes = sink.max_bytes if sink is not None else -1
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="rig-copy")
        self.slots = threading.BoundedSemaphore(2 * threads)
        self.futures: list[Future[list[str]]] = []
        self.stopped = False

    def submit(self, s_fd: int, d_fd: int, rel_dir: str, files: list[tuple[str, int]]) -> None:
        """Copy `files` (name, inode) from one open directory to another; the descriptors are
        duplicated, so the caller may close its own."""
        self.slots.acquire()
        try:
            fds = os.dup(s_fd), os.dup(d_fd)
        except OSError:
            self.slots.release()
            raise
        future = self.pool.submit(self._copy, *fds, rel_dir, files)
        future.add_done_callback(lambda _f: self.slots.release())
        self.futures.append(future)

    def _copy(self, s_fd: int, d_fd: int, rel_dir: str, files: list[tuple[str, int]]) -> list[str]:
        special = []
        try:
            for name, inode in files:
                if self.stopped:
                    break
                rel = _join(rel_dir, name)
                try:
                    copied = _copy_file(s_fd, d_fd, name, inode, self.max_bytes, self.room)
                except (NoRoom, OSError) as exc:
                    if isinstance(exc, NoRoom) or exc.errno in _NO_SPACE:
                        self.full = self.stopped = True
                        break
                    copied = None
                if copied is None:
                    special.append(rel)
                elif self.sink is not None:
                    with self.lock:
                        self.sink.file(rel, *copied)
        finally:
            os.close(s_fd)
            os.close(d_fd)
        return special

    def link(self, rel: str, target: str) -> None:
        if self.sink is not None:
            with self.lock:
                self.sink.link(rel, target)

    def finish(self, stop: bool) -> list[str]:
        """Wait for every batch (told to stop early if `stop`); the files that could not be copied."""
        self.stopped = stop
        self.pool.shutdown(wait=True)
        return [rel for future in self.futures for rel in future.result()]


def copy_tree(
    src: Path,
    dest: Path,
    bounds: Bounds = Bounds(),
    sink: CopySink | None = None,
    threads: int = COPY_THREADS,
    room: int | None = None,
) -> TreeStats:
    """Copy an agent-written tree to `dest` (created here): directories, regular files, inner links.

    Left out and reported: FIFOs, sockets and devices (`special`), symlinks whose target is
    absolute or leaves the tree (`outward_links`), and the build and cache trees of EXCLUDED_NAMES
    (counted in `excluded`). Raises LimitExceeded past `bounds`, and NoRoom when the files would
    take more than `room` bytes (pages and inodes of a memory file system counted) or the file
    system is full; `dest` then holds a partial copy. Every file and link written is handed to
    `sink` as it is written (from up to `threads` threads, never two at once), so that nothing
    needs to read the copy again to digest it.
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
    copier = _Copier(sink, threads, room)
    stack = [(src_fd, dst_fd, "", 0, _entries(src_fd))]
    files: list[tuple[str, int]] = []
    finished = False
    try:
        while stack and not copier.full:
            s_fd, d_fd, rel_dir, depth, it = stack[-1]
            entry = next(it, None)
            if entry is None or len(files) >= copier.BATCH:
                if files:
                    copier.submit(s_fd, d_fd, rel_dir, files)
                    files = []
                if entry is None:
                    stack.pop()
                    os.close(s_fd)
                    os.close(d_fd)
                    continue
            name, rel = entry.name, _join(rel_dir, entry.name)
            # The entry's type from the directory listing (no stat call unless the file system
            # does not give it); a regular file is checked again on its open descriptor.
            try:
                is_dir, is_link = entry.is_dir(follow_symlinks=False), entry.is_symlink()
                is_file = entry.is_file(follow_symlinks=False)
            except OSError:
                stats.special.append(rel)
                continue
            if is_dir:
                if is_excluded(name):
                    walk.count(True, depth + 1)
                    below = _count_excluded(walk, s_fd, name, depth + 1)
                    _count_under(stats, name, 1 + below)
                    stats.left_out.append(rel)
                    continue
                walk.count(True, depth + 1)
                try:
                    child_src = os.open(name, _DIR_FLAGS, dir_fd=s_fd)
                except OSError:
                    stats.special.append(rel)
                    continue
                if files:
                    copier.submit(s_fd, d_fd, rel_dir, files)
                    files = []
                os.mkdir(name, 0o755, dir_fd=d_fd)
                child_dst = os.open(name, _DIR_FLAGS, dir_fd=d_fd)
                stack.append((child_src, child_dst, rel, depth + 1, _entries(child_src)))
                continue
            walk.count(False, depth + 1)
            if is_excluded(name):
                # A `.git` file (a worktree pointer) or a stray cache file.
                _count_under(stats, name, 1)
                stats.left_out.append(rel)
            elif is_link:
                try:
                    target = os.readlink(name, dir_fd=s_fd)
                except OSError:
                    stats.special.append(rel)
                    continue
                if _stays_inside(rel_dir, target):
                    os.symlink(target, name, dir_fd=d_fd)
                    copier.link(rel, target)
                else:
                    stats.outward_links.append(rel)
            elif is_file:
                files.append((name, entry.inode()))
            else:
                stats.special.append(rel)
        finished = not copier.full
    except OSError as exc:
        if exc.errno not in _NO_SPACE:
            raise
        copier.full = True
    finally:
        for s_fd, d_fd, _rel, _depth, _it in stack:
            os.close(s_fd)
            os.close(d_fd)
        # Nothing is written to `dest` once this returns or raises.
        stats.special.extend(copier.finish(stop=not finished))
    if copier.full:
        over = copier.room is not None and copier.room.left < 0
        why = f"it would take more than {room} bytes" if over else "its file system is full"
        raise NoRoom(f"no room to copy the workspace to {dest}: {why}")
    stats.special.sort()
    stats.left_out.sort()
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
    return remove_trees([path], timeout)[0]


def remove_trees(paths: list[Path], timeout: float = REMOVE_TIMEOUT_S) -> list[str | None]:
    """Remove several trees at once, as remove_tree does (one `rm` each, side by side); per
    path, None or why it could not be removed."""
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    procs = [
        subprocess.Popen(
            ["rm", "-rf", "--one-file-system", "--", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for path in paths
    ]
    deadline = time.monotonic() + timeout
    problems: list[str | None] = []
    for path, proc in zip(paths, procs, strict=True):
        try:
            _out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            problems.append(f"removing {path} took over {timeout:g}s")
            continue
        problems.append(
            None
            if proc.returncode == 0
            else (err.strip().splitlines() or [f"rm exited {proc.returncode}"])[0]
        )
    return problems


def read_bounded(path: Path | str, max_bytes: int) -> bytes | None:
    """At most `max_bytes` of a regular file, never following a link or opening anything else."""
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return _read_exactly(fd, max_bytes)
    finally:
        os.close(fd)


# A configuration file rig reads (pyproject.toml, package.json, a runner's config) is far smaller.
TEXT_MAX_BYTES = 16 * 1024 * 1024


def read_text(path: Path | str) -> str | None:
    """A regular file's UTF-8 text (read_bounded, at most TEXT_MAX_BYTES); None when it is absent,
    a link, no regular file or no text."""
    data = read_bounded(path, TEXT_MAX_BYTES)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None

"""A harness's session files read as they grow, for its run budget (rig.confine.run_budget).

A harness whose stdout reports usage only once its turn is over (Codex, Gemini CLI) records each
model response in its session as it goes. Its adapter declares where the session files lie below
the path the silence watchdog watches and how to read their records (`SessionUsage`); the
supervisor (rig.confine.agent) has a `SessionTail` read the new records each time the session
grew, and the run's meter counts their usage like the stdout's.

The session lies in the run's private home, where the agent may write too: it is hostile input.
Only the declared layout is walked (one name pattern per level: a bounded depth, never a tree the
agent made), through directory descriptors opened with O_NOFOLLOW, each entry's type checked
without following it, at most MAX_ENTRIES names a directory and MAX_FILES session files. A file is
opened with O_NOFOLLOW | O_NONBLOCK and read from where the last read stopped, at most READ_BYTES
a read and MAX_SESSION_BYTES in all; a line is read once complete, one past MAX_LINE_BYTES skipped
(rig.confine.events). A file replaced or shrunk is read again from its start: the keys of its
responses make them count once. Nothing here raises: a session that cannot be read counts nothing
more, the run goes on, and the parse of its saved session after the run is what the record says.
"""

import fnmatch
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.confine.events import MAX_LINE_BYTES, JsonLines
from rig.confine.run_budget import LiveUsage, UsageMeter

# No session of a run is this large (the agent's file size limit is larger): past it, the budget
# counts no more of that file.
MAX_SESSION_BYTES = 512 * 1024 * 1024
# Per poll of one file: a session that grew by more is read on by the next polls.
READ_BYTES = MAX_LINE_BYTES
MAX_ENTRIES = 4096
MAX_FILES = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

RecordUsage = Callable[[dict[str, Any]], list[LiveUsage]]
"""The usage of the model responses one JSON record of a session file holds, each keyed so that
a response recorded again (or the file read again) counts once."""


@dataclass(frozen=True)
class SessionUsage:
    """Where a harness's session files lie below the watched session directory and how to read them.

    `layout`: one name pattern (fnmatch) per level below it, the last one the files'. `reader`:
    makes the record reader of one file, which is given that file's JSON records in order (it may
    keep what earlier records said, such as the model); a reader that keeps nothing may be
    returned as is."""

    layout: tuple[str, ...]
    reader: Callable[[], RecordUsage]


class _File(JsonLines):
    """One session file as read so far: where the next read starts, and its records' reader."""

    def __init__(self, name: str, identity: tuple[int, int], read: RecordUsage, meter: UsageMeter) -> None:
        super().__init__()
        self.name = name
        self.identity = identity
        self.offset = 0
        self.records = 0
        self.read = read
        self.meter = meter

    @property
    def done(self) -> bool:
        return self.meter.done

    def event(self, event: dict[str, Any]) -> None:
        self.records += 1
        try:
            usages = self.read(event)
        except Exception:  # the adapter's reader, on hostile input: it must not end the run
            return
        for index, live in enumerate(usages):
            # A key of the file's own: the same response in two files (a copy, a fork) is two.
            key = live.key if live.key is not None else f"@{self.records}.{index}"
            self.meter.count(live, f"{self.name}:{key}")


class SessionTail:
    """The session files of one run below `root`, found by `usage`'s layout, measured and read
    into `meter` as they grow (None: measured only, for the silence watchdog)."""

    def __init__(self, root: Path, usage: SessionUsage, meter: UsageMeter | None) -> None:
        self.root = root
        self.usage = usage
        self.meter = meter
        self._files: dict[str, _File] = {}

    def poll(self) -> int:
        """Read what every session file gained since the last poll (until the meter stops); the
        files' total size (-1: none yet), which the silence watchdog watches."""
        try:
            root = os.open(self.root, _DIR_FLAGS)
        except OSError:
            return -1
        total = -1
        try:
            with closing(self._walk(root, self.usage.layout, "")) as files:
                for count, (parent, name) in enumerate(files):
                    if count >= MAX_FILES:
                        break
                    try:
                        total = max(total, 0) + self._read(parent, name)
                    except OSError:
                        continue  # gone or replaced since it was listed
        except Exception:  # a session that cannot be read must not end the run
            pass
        finally:
            os.close(root)
        return total

    def _walk(self, dir_fd: int, layout: tuple[str, ...], prefix: str) -> Iterator[tuple[int, str]]:
        """(directory descriptor, name) of each regular file the layout matches below `dir_fd`;
        each descriptor is open while its files are read."""
        pattern, below = layout[0], layout[1:]
        names = []
        with os.scandir(dir_fd) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_ENTRIES:
                    break
                if not fnmatch.fnmatchcase(entry.name, pattern):
                    continue
                # DirEntry's types come from lstat: a symlink is neither a directory nor a file.
                if entry.is_dir(follow_symlinks=False) if below else entry.is_file(follow_symlinks=False):
                    names.append(entry.name)
        # Names sort by time in every harness's layout: the first files are read first.
        for name in sorted(names)[:MAX_FILES]:
            if not below:
                yield dir_fd, f"{prefix}{name}"
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                yield from self._walk(child, below, f"{prefix}{name}/")
            finally:
                os.close(child)

    def _read(self, dir_fd: int, rel: str) -> int:
        """Read what file `rel` (its last part a name in `dir_fd`) gained since the last poll; its
        size."""
        fd = os.open(rel.rsplit("/", 1)[-1], _FILE_FLAGS, dir_fd=dir_fd)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return 0
            if self.meter is None or self.meter.done:
                return info.st_size
            identity = (info.st_dev, info.st_ino)
            known = self._files.get(rel)
            if known is None or known.identity != identity or info.st_size < known.offset:
                known = self._files[rel] = _File(rel, identity, self.usage.reader(), self.meter)
            end = min(info.st_size, MAX_SESSION_BYTES)
            if known.offset >= end:
                return info.st_size
            # A file that grew by more is read on by the next polls.
            data = os.pread(fd, min(end - known.offset, READ_BYTES), known.offset)
        finally:
            os.close(fd)
        known.offset += len(data)
        known.feed(data)
        return info.st_size

"""The results store of one experiment: append-only JSONL records and per-attempt artifact directories.

Layout of `root` (e.g. experiments/results/<exp>/):

- `runs.jsonl`: one scored run record per line;
- `quarantine.jsonl`: records classified as infrastructure failures, never deleted or rewritten here;
- `runs/<run_id>/attempt-<n>/`: the artifacts of each attempt, so a rerun never overwrites evidence;
- `torn/`: bytes cut off the end of a JSONL file by `repair()` (a crash mid-append), kept for inspection.

Lines are encoded and decoded with jsonlines. Every append is one write of a whole line under an
inter-process file lock, followed by fsync, so concurrent writers (threads or processes) never
interleave and a crash can at worst leave a torn last line, which readers skip and the next writer
repairs. An append that fails part way (disk full, I/O error) is cut back to the file's previous
end before the error is raised, so a failed append leaves the file exactly as it was; every OS
error surfaces as a one-line StoreError.
"""

import errno
import io
import json
import os
import re
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonlines
from filelock import FileLock, Timeout

RUN_ID_RE = re.compile(r"[A-Za-z0-9_.-]+")
ATTEMPT_RE = re.compile(r"attempt-([0-9]+)")

# Long enough for a slow disk under heavy contention, short enough that a wedged lock surfaces as
# an error instead of a silently hung experiment.
LOCK_TIMEOUT_S = 120.0
# filelock polls; its 50 ms default makes contended appends from several processes crawl.
LOCK_POLL_S = 0.002
_SCAN_BLOCK = 64 * 1024


class StoreError(Exception):
    """A results file or directory the store cannot use; the message names the file, line and fix."""


def _os_error(path: Path, action: str, exc: OSError, done: str = "") -> StoreError:
    """A one-line StoreError for an OS error on `path`, with the fix for the common causes."""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        # Imported only here: reading the records needs none of the workspace's machinery.
        from rig.workspace.scratch import disk_name

        fix = f"free space on {disk_name(path)} (or raise the quota), then rerun to resume"
    elif exc.errno == errno.EROFS:
        fix = "the file system is read-only; give a writable results root (--results-root)"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        fix = "make it writable by this user, or give another results root (--results-root)"
    else:
        fix = "check the disk and the file, then rerun to resume"
    return StoreError(f"{path}: {action} failed ({reason}){done}; {fix}")


def _is_record(line: bytes) -> bool:
    """Whether one complete line is a record (a JSON object) or blank."""
    try:
        jsonlines.Reader([line]).read(type=dict, skip_empty=True)
    except EOFError:
        return True
    except jsonlines.InvalidLineError:
        return False
    return True


def _serialize(record: dict[str, Any], path: Path) -> bytes:
    if not isinstance(record, dict):
        raise StoreError(f"{path}: refusing to append a {type(record).__name__}; a record must be a dict")
    out = io.BytesIO()
    try:
        jsonlines.Writer(out, sort_keys=True).write(record)
    except (TypeError, ValueError) as exc:
        raise StoreError(
            f"{path}: record is not JSON-serializable ({exc}); convert its values to plain types"
        ) from None
    line = out.getvalue()
    # jsonlines never emits a raw newline inside a record; the check guards the one-record-per-line
    # invariant against a future change of its options.
    if line.count(b"\n") != 1:
        raise StoreError(f"{path}: serialized record spans several lines; do not indent records")
    return line


def _line_start(fd: int, end: int) -> int:
    """Offset just after the last b"\\n" before `end` (0 if none), scanning backwards in blocks."""
    pos = end
    while pos > 0:
        size = min(_SCAN_BLOCK, pos)
        block = os.pread(fd, size, pos - size)
        idx = block.rfind(b"\n")
        if idx >= 0:
            return pos - size + idx + 1
        pos -= size
    return 0


def _torn_start(fd: int) -> int | None:
    """Where the torn tail of an open JSONL file begins, or None if its last line is sound.

    Torn means bytes after the last newline (a write cut short), or a last line that is not a JSON
    object: readers skip exactly these, so the repair keeps appends and reads consistent.
    """
    size = os.fstat(fd).st_size
    if size == 0:
        return None
    if os.pread(fd, 1, size - 1) != b"\n":
        return _line_start(fd, size)
    start = _line_start(fd, size - 1)
    return None if _is_record(os.pread(fd, size - 1 - start, start)) else start


def fsync_dir(path: Path) -> None:
    """Make a rename or creation in the folder `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _cut_back(fd: int, end: int) -> str:
    """Truncate a failed append back to `end`; what became of the partial line, for the message.

    Shrinking a file needs no free space, so this works on a full disk; if it fails anyway, the
    partial line has no newline and is a torn tail that readers skip and the next append repairs.
    """
    try:
        partial = os.fstat(fd).st_size - end
        if partial > 0:
            os.ftruncate(fd, end)
            os.fsync(fd)
    except OSError as exc:
        return (
            f"; the partial line could not be cut back ({exc.strerror}): readers skip it and the next "
            "append moves it to torn/"
        )
    if partial > 0:
        return f"; nothing was appended (the {partial} bytes written were cut back)"
    return "; nothing was appended"


def _write_all(fd: int, data: bytes) -> None:
    # A regular file takes the whole buffer in one write; the loop only covers a short write
    # (disk full, signal), and the lock keeps even that from interleaving with another writer.
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class ResultsStore:
    """Append-only run records, quarantine records and attempt directories of one experiment."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.runs_path = self.root / "runs.jsonl"
        self.quarantine_path = self.root / "quarantine.jsonl"
        self.torn_dir = self.root / "torn"
        self._lock_path = self.root / ".lock"
        self._writer_lock_path = self.root / ".writer.lock"
        self._holder_path = self.root / ".writer.json"

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.root)!r})"

    # -- locking ---------------------------------------------------------------------------

    @contextmanager
    def writer(self) -> Iterator[None]:
        """Hold the experiment's one-writer lock for as long as `rig run` runs it.

        A second runner of the same experiment is refused with a StoreError naming the holder. The
        lock is an flock, released by the kernel when its holder dies however it died, so a lock
        left by a killed runner is never in the way; the holder file only names who holds it.
        """
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            lock = FileLock(self._writer_lock_path, timeout=0)
            lock.acquire()
        except Timeout:
            raise StoreError(
                f"{self.root}: this experiment is already being run ({self._holder()}); wait for that "
                "`rig run` to finish or stop it, then rerun to resume"
            ) from None
        except OSError as exc:
            raise _os_error(self._writer_lock_path, "taking the one-writer lock", exc) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": datetime.now(UTC).isoformat()}
        try:
            self._holder_path.write_text(json.dumps(holder) + "\n")
            yield
        finally:
            self._holder_path.unlink(missing_ok=True)
            lock.release()

    def check_writer(self) -> None:
        """Raise the StoreError `writer` would raise if another runner holds the experiment now."""
        if self._writer_lock_path.exists():
            with self.writer():
                pass

    def _holder(self) -> str:
        """Who holds the one-writer lock, as far as its holder file says."""
        try:
            holder = json.loads(self._holder_path.read_text())
            return f"pid {holder['pid']} on host {holder['host']}, since {holder['since']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "by a process that has not written its name yet"

    def _lock(self) -> FileLock:
        # A fresh lock object per operation: flock conflicts between separate open file
        # descriptions, so threads of one process exclude each other as processes do.
        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(self._lock_path, timeout=LOCK_TIMEOUT_S, poll_interval=LOCK_POLL_S)

    def _locked(self) -> FileLock:
        try:
            lock = self._lock()
            lock.acquire()
        except Timeout:
            raise StoreError(
                f"{self._lock_path}: lock not acquired within {LOCK_TIMEOUT_S:.0f}s; "
                "another rig process is stuck writing this experiment, stop it and retry"
            ) from None
        except OSError as exc:
            raise _os_error(self._lock_path, "taking the results lock", exc) from None
        return lock

    # -- appends ---------------------------------------------------------------------------

    def _append(self, path: Path, record: dict[str, Any]) -> None:
        data = _serialize(record, path)
        lock = self._locked()
        try:
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                raise _os_error(path, "opening for an append", exc) from None
            try:
                # A torn tail must go first, or the new line would merge with its garbage.
                self._repair_file(path, fd)
                end = os.fstat(fd).st_size
                try:
                    _write_all(fd, data)
                    os.fsync(fd)
                except OSError as exc:
                    raise _os_error(path, "appending a record", exc, _cut_back(fd, end)) from None
            finally:
                os.close(fd)
        finally:
            lock.release()

    def append_run(self, record: dict[str, Any]) -> None:
        """Append one scored run record to runs.jsonl (durable on return, safe across processes)."""
        self._append(self.runs_path, record)

    def append_quarantine(self, record: dict[str, Any]) -> None:
        """Append one infrastructure-failure record to quarantine.jsonl (durable on return)."""
        self._append(self.quarantine_path, record)

    # -- reads -----------------------------------------------------------------------------

    @staticmethod
    def _read(path: Path) -> list[dict[str, Any]]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise _os_error(path, "reading", exc) from None
        lines = data.split(b"\n")
        # The piece after the final newline is empty for a sound file and the torn tail of an
        # interrupted append otherwise; either way it holds no record.
        complete, torn_tail = lines[:-1], lines[-1]
        records: list[dict[str, Any]] = []
        try:
            for record in jsonlines.Reader(complete).iter(type=dict, skip_empty=True):
                records.append(record)
        except jsonlines.InvalidLineError as exc:
            # An interrupted append whose line happened to end in a newline byte is a torn tail too.
            if exc.lineno != len(complete) or torn_tail:
                reason = str(exc).removesuffix(f" (line {exc.lineno})")
                raise StoreError(
                    f"{path}: line {exc.lineno} is not a JSON object ({reason}); the file was edited by "
                    "hand? restore it from version control or a backup, or remove that line"
                ) from None
        return records

    def read_runs(self) -> list[dict[str, Any]]:
        """Every record in runs.jsonl, skipping a torn last line; [] if the file does not exist."""
        return self._read(self.runs_path)

    def read_quarantine(self) -> list[dict[str, Any]]:
        """Every record in quarantine.jsonl, skipping a torn last line; [] if the file does not exist."""
        return self._read(self.quarantine_path)

    # -- repair ----------------------------------------------------------------------------

    def _torn_dest(self, path: Path) -> tuple[Path, int]:
        try:
            self.torn_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _os_error(self.torn_dir, f"saving the torn last line of {path.name}", exc) from None
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        suffix = 0
        while True:
            name = f"{path.name}.{stamp}" + (f".{suffix}" if suffix else "")
            dest = self.torn_dir / name
            try:
                return dest, os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                suffix += 1
            except OSError as exc:
                raise _os_error(dest, f"saving the torn last line of {path.name}", exc) from None

    def _repair_file(self, path: Path, fd: int) -> str | None:
        """Cut the torn tail of the open file `fd` into torn/; the caller holds the lock."""
        start = _torn_start(fd)
        if start is None:
            return None
        size = os.fstat(fd).st_size
        tail = os.pread(fd, size - start, start)
        dest, out = self._torn_dest(path)
        try:
            try:
                _write_all(out, tail)
                # The torn bytes must be durable before they disappear from the original file.
                os.fsync(out)
            finally:
                os.close(out)
            fsync_dir(self.torn_dir)
        except OSError as exc:
            # The original keeps its torn tail (readers skip it) until the bytes can be saved.
            dest.unlink(missing_ok=True)
            raise _os_error(
                dest, f"saving the torn last line of {path.name}", exc, "; nothing was changed"
            ) from None
        try:
            os.ftruncate(fd, start)
            os.fsync(fd)
        except OSError as exc:
            raise _os_error(path, f"cutting its torn last line (saved in {dest})", exc) from None
        return (
            f"{path}: moved a torn last line ({len(tail)} bytes, left by an interrupted append) to {dest}; "
            f"the file now ends with its last complete record"
        )

    def repair(self) -> list[str]:
        """Truncate a torn last line off runs.jsonl and quarantine.jsonl, saving the bytes under torn/.

        Returns one human-readable message per repaired file; [] when nothing needed repair.
        """
        if not self.root.is_dir():
            return []
        messages: list[str] = []
        lock = self._locked()
        try:
            for path in (self.runs_path, self.quarantine_path):
                try:
                    fd = os.open(path, os.O_RDWR)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise _os_error(path, "opening for a repair", exc) from None
                try:
                    message = self._repair_file(path, fd)
                finally:
                    os.close(fd)
                if message:
                    messages.append(message)
        finally:
            lock.release()
        return messages

    # -- attempts --------------------------------------------------------------------------

    def new_attempt_dir(self, run_id: str, number: int | None = None) -> tuple[int, Path]:
        """Create and return (n, path) of the next free runs/<run_id>/attempt-<n> (n from 1), or of
        attempt `number` exactly (a Dask worker makes the folder its coordinator numbered).

        Existing attempt directories count even when no record mentions them (a killed run), and
        creation is exclusive, so two processes never get the same directory.
        """
        if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id) or run_id in (".", ".."):
            raise StoreError(
                f"{self.root / 'runs'}: run id {run_id!r} is not a safe directory name; "
                "use only letters, digits, '_', '.' and '-'"
            )
        run_dir = self.root / "runs" / run_id
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            numbers = [int(m.group(1)) for p in run_dir.iterdir() if (m := ATTEMPT_RE.fullmatch(p.name))]
        except OSError as exc:
            raise _os_error(run_dir, "creating the run's folder", exc) from None
        n = number if number is not None else max(numbers, default=0) + 1
        while True:
            path = run_dir / f"attempt-{n}"
            try:
                path.mkdir(exist_ok=False)
            except FileExistsError:
                if number is not None:
                    raise StoreError(f"{path}: already exists; attempt {number} was made twice") from None
                n += 1
                continue
            except OSError as exc:
                raise _os_error(path, "creating an attempt folder", exc) from None
            return n, path

    # -- rewrite ---------------------------------------------------------------------------

    def rewrite_runs(self, records: list[dict[str, Any]]) -> None:
        """Atomically replace runs.jsonl with `records` (only for an explicit `rig reclassify --write`)."""
        data = b"".join(_serialize(record, self.runs_path) for record in records)
        lock = self._locked()
        try:
            try:
                fd, tmp_name = tempfile.mkstemp(dir=self.root, prefix=".runs.", suffix=".tmp")
            except OSError as exc:
                raise _os_error(self.root, "creating a temporary file to rewrite runs.jsonl", exc) from None
            tmp = Path(tmp_name)
            try:
                try:
                    _write_all(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.chmod(tmp, 0o644)
                os.replace(tmp, self.runs_path)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise _os_error(self.runs_path, "rewriting", exc, "; the file was left unchanged") from None
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            try:
                fsync_dir(self.root)
            except OSError as exc:
                raise _os_error(self.root, "syncing the rewritten runs.jsonl", exc) from None
        finally:
            lock.release()

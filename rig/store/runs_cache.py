"""A columnar cache of runs.jsonl and quarantine.jsonl, kept up to date from the last byte indexed.

runs.jsonl stays the append-only source of truth; `runs.cache/` beside it holds what the readers
(`load_runs`, `rig status`, `rig report`) use of each record, already migrated (rig.store.migrate) and
typed, as Parquet files: one or more immutable parts per JSONL file, and a manifest naming the
parts and the byte offset, line count and record count they cover. A reader checks the manifest
against the file (same inode, not shorter than the offset, the same hash of the first and the last
64 KiB before the offset, the same cache code), parses only the complete lines after the offset,
and saves them as a new part. Anything that does not match (a rewrite by `rig reclassify --write`,
a copied folder, an edit by hand, another version of this module) rebuilds the cache from byte 0.

The cache is derived data: deleting `runs.cache/` loses nothing. It is written under its own lock
(`runs.cache/.lock`, so a long first build never holds up `rig run`'s appends under the results
lock), each part and manifest into a temporary file that is fsynced and renamed, so a reader sees
the old manifest or the new one, never half of one. A reader that cannot write the folder (a
read-only copy) uses what valid cache there is and parses the rest in memory.

`RIG_RUNS_CACHE` chooses: `auto` (the default) keeps a cache once a file reaches `MIN_BYTES` or
has one already (below that, parsing in memory is faster than importing the Parquet reader),
`on` always does, `off` never reads or writes one. Every mode gives the same records.
"""

import gc
import hashlib
import json
import os
import secrets
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from rig.store import columns as columns_module
from rig.store import migrate as migrate_module
from rig.store.columns import QUARANTINE_COLUMNS, REPORT_COLUMNS, RUN_COLUMNS, Column, Record, Unfit
from rig.store.migrate import RecordSchemaError, migrate, warn_duplicates
from rig.store.results import ResultsStore, StoreError, fsync_dir

if TYPE_CHECKING:
    import pyarrow as pa

CACHE_DIR = "runs.cache"
ENV = "RIG_RUNS_CACHE"
MODES = ("auto", "on", "off")
# About 600 records of a real harness: parsing them takes less time than importing pyarrow.parquet.
MIN_BYTES = 4 * 1024 * 1024
# How much of the indexed prefix is hashed at each end to tell an append from a rewrite.
EDGE_BYTES = 64 * 1024
# Lines are parsed this many bytes at a time, so a first build holds one chunk's records at once.
CHUNK_BYTES = 16 * 1024 * 1024
# More parts than this are merged into one when the next part is saved.
MAX_PARTS = 8
# A second reader waits this long for one saving the cache, then goes on without saving its own.
LOCK_TIMEOUT_S = 30.0


@contextmanager
def paused_gc() -> Iterator[None]:
    """Hold off Python's cyclic garbage collector while building many small objects at once.

    Records, rows and keys hold no reference cycles, but each few hundred allocations trigger a
    collection that walks every live container: reading 100,000 records took five times longer.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class _Kind:
    """One JSONL file of a results folder and what the cache keeps of each of its records."""

    name: str
    columns: tuple[Column, ...]

    def path(self, store: ResultsStore) -> Path:
        return store.runs_path if self.name == "runs" else store.quarantine_path


RUNS = _Kind("runs", RUN_COLUMNS)
QUARANTINE = _Kind("quarantine", QUARANTINE_COLUMNS)


def _schema(kind: _Kind) -> "pa.Schema":
    return columns_module.schema(kind.columns)


@cache
def _code_digest() -> str:
    """What the cached columns were computed by: this module, the column table and the migrations."""
    digest = hashlib.blake2b(digest_size=16)
    for module in (__file__, columns_module.__file__, migrate_module.__file__):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()


# -- parsing ------------------------------------------------------------------------------------


def _loads(line: bytes) -> Any:
    # orjson, not jsonlines (which rig.store.results uses): this parses every new line of a 100,000-record
    # runs.jsonl on the report's hot path, several times faster than the json module underneath jsonlines.
    import orjson

    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        # The standard module also reads what json.dumps may write beyond strict JSON (NaN,
        # Infinity) and words the error of a line that is no JSON at all, as the store does.
        return json.loads(line.decode("utf-8"))


@dataclass
class _Position:
    """How far a JSONL file is indexed: the byte after the last indexed line, lines and records."""

    offset: int = 0
    lines: int = 0
    records: int = 0


def _bad_line(path: Path, number: int, exc: Exception) -> StoreError:
    reason = f"is not valid JSON ({exc})" if not isinstance(exc, TypeError) else str(exc)
    return StoreError(
        f"{path}: line {number} {reason}; the file was edited by hand? "
        "restore it from version control or a backup, or remove that line"
    )


def _chunks(fd: int, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) of the complete lines between `start` and `end`, about CHUNK_BYTES at a time."""
    pos, carry = start, b""
    while pos < end:
        block = os.pread(fd, min(CHUNK_BYTES, end - pos), pos)
        if not block:
            return  # cut short while being read: what is gone is no longer there to index
        pos += len(block)
        data = carry + block
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data  # a line longer than a chunk: read on until its newline
            continue
        yield pos - len(data), data[: cut + 1]
        carry = data[cut + 1 :]


def _parse(fd: int, path: Path, kind: _Kind, at: _Position, end: int) -> tuple[list["pa.Table"], _Position]:
    """The records of the complete lines of `fd` from `at` up to `end`, as tables, and where they end.

    As the store reads: blank lines hold no record, a torn tail (bytes after the last newline) is
    left for a later read, and so is a last complete line that is not a JSON object when nothing
    follows it (an interrupted append); any other such line is a StoreError naming it.
    """
    import pyarrow as pa

    schema = _schema(kind)
    reads = [column.read for column in kind.columns]
    tables: list[pa.Table] = []
    pos = _Position(at.offset, at.lines, at.records)
    bad: tuple[int, Exception] | None = None
    scanned = at.offset
    for offset, data in _chunks(fd, at.offset, end):
        rows: list[list[Any]] = []
        for line in data.split(b"\n")[:-1]:
            if bad is not None:
                raise _bad_line(path, *bad)
            number = pos.lines + 1
            if line.strip():
                try:
                    obj = _loads(line)
                except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError among them
                    bad = (number, exc)
                    continue
                if not isinstance(obj, dict):
                    bad = (number, TypeError(f"is a JSON {type(obj).__name__}, not an object"))
                    continue
                rows.append(_migrated_row(reads, path, obj, pos.records + 1))
                pos.records += 1
            pos.lines = number
            pos.offset += len(line) + 1
        scanned = offset + len(data)
        if rows:
            tables.append(_to_table(rows, schema, path))
    if bad is not None and scanned < end:
        raise _bad_line(path, *bad)
    return tables, pos


def _to_table(rows: list[list[Any]], schema: "pa.Schema", path: Path) -> "pa.Table":
    import pyarrow as pa

    columns = zip(*rows, strict=True)
    try:
        arrays = [pa.array(values, type=field.type) for values, field in zip(columns, schema, strict=True)]
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise StoreError(
            f"{path}: a record holds a value of the wrong type ({exc}); the file was edited by hand? "
            "restore it from version control or a backup"
        ) from None
    return pa.Table.from_arrays(arrays, schema=schema)


def _migrated_row(reads: list[Callable[[Record], Any]], path: Path, obj: Record, number: int) -> list[Any]:
    """The values of the columns (their `reads`) of one record, migrated."""
    try:
        record = migrate(obj)
    except RecordSchemaError as exc:
        raise RecordSchemaError(f"{path}: record {number} ({obj.get('run_id')}): {exc}") from None
    try:
        return [read(record) for read in reads]
    except (Unfit, KeyError, TypeError, ValueError, AttributeError) as exc:
        what = f"lacks the field {exc}" if isinstance(exc, KeyError) else f"cannot be read: {exc}"
        raise StoreError(
            f"{path}: record {number} ({obj.get('run_id')}) {what}; the file was edited by hand? "
            "restore it from version control or a backup"
        ) from None


# -- the manifest -------------------------------------------------------------------------------


def _edges(fd: int, offset: int) -> tuple[str, str]:
    """Hashes of the first and the last EDGE_BYTES before `offset`."""
    head = os.pread(fd, min(EDGE_BYTES, offset), 0)
    tail_start = max(0, offset - EDGE_BYTES)
    tail = os.pread(fd, offset - tail_start, tail_start)
    return hashlib.blake2b(head).hexdigest(), hashlib.blake2b(tail).hexdigest()


def _identity(fd: int) -> list[int]:
    st = os.fstat(fd)
    return [st.st_dev, st.st_ino]


def _manifest_path(cache_dir: Path, kind: _Kind) -> Path:
    return cache_dir / f"{kind.name}.json"


def _read_manifest(cache_dir: Path, kind: _Kind) -> dict[str, Any] | None:
    try:
        manifest = json.loads(_manifest_path(cache_dir, kind).read_bytes())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _matches(manifest: dict[str, Any] | None, fd: int) -> bool:
    """Whether `manifest` indexes a prefix of the open file `fd` with this rig's code."""
    if manifest is None or manifest.get("code") != _code_digest() or manifest.get("file") != _identity(fd):
        return False
    offset = manifest.get("offset")
    if not all(isinstance(manifest.get(key), int) for key in ("offset", "lines", "records")):
        return False
    if not isinstance(manifest.get("parts"), list) or not 0 <= offset <= os.fstat(fd).st_size:
        return False
    return list(_edges(fd, offset)) == manifest.get("edges")


def _read_parts(
    cache_dir: Path, manifest: dict[str, Any], kind: _Kind, columns: list[str] | None
) -> list["pa.Table"] | None:
    """The manifest's parts (only `columns`, if given); None when one is gone (a concurrent saver
    merged them) or unreadable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _select(_schema(kind), columns)
    tables = []
    for name in manifest["parts"]:
        try:
            table = pq.read_table(cache_dir / str(name), columns=columns)
        except (OSError, pa.ArrowException):
            return None
        if not table.schema.equals(schema):
            return None
        tables.append(table)
    return tables


def _select(schema: "pa.Schema", columns: list[str] | None) -> "pa.Schema":
    import pyarrow as pa

    return schema if columns is None else pa.schema([schema.field(name) for name in columns])


# -- saving -------------------------------------------------------------------------------------


def _write_atomically(path: Path, write: Callable[[Any], None]) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _save(
    cache_dir: Path,
    kind: _Kind,
    fd: int,
    on_disk: dict[str, Any] | None,
    base: list[str],
    new: list["pa.Table"],
    pos: _Position,
) -> None:
    """Save the new records as a part after the `base` parts (all records as one part past
    MAX_PARTS) and the manifest, if the manifest is still `on_disk`, the one read before parsing.

    Best effort: a folder this process cannot write, or another process saving the cache at the
    same time, leaves the cache as it was; the caller has the records either way.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        cache_dir.mkdir(exist_ok=True)
        lock = FileLock(cache_dir / ".lock", timeout=LOCK_TIMEOUT_S)
        lock.acquire()
    except (OSError, Timeout):
        return
    try:
        if _read_manifest(cache_dir, kind) != on_disk:
            return  # another process saved meanwhile; its manifest stands
        parts, write = list(base), new
        if len(parts) + 1 > MAX_PARTS and on_disk is not None:
            cached = _read_parts(cache_dir, on_disk, kind, None)
            if cached is not None:
                parts, write = [], cached + new
        if write:
            part = f"{kind.name}-{secrets.token_hex(8)}.parquet"
            table = pa.concat_tables(write) if len(write) > 1 else write[0]
            _write_atomically(cache_dir / part, lambda f: pq.write_table(table, f))
            parts.append(part)
        manifest = {
            "code": _code_digest(),
            "file": _identity(fd),
            "offset": pos.offset,
            "lines": pos.lines,
            "records": pos.records,
            "edges": list(_edges(fd, pos.offset)),
            "parts": parts,
        }
        _write_atomically(
            _manifest_path(cache_dir, kind), lambda f: f.write(json.dumps(manifest, indent=1).encode())
        )
        fsync_dir(cache_dir)
        for stale in cache_dir.glob(f"{kind.name}-*.parquet"):
            if stale.name not in parts:
                stale.unlink(missing_ok=True)
    except OSError:
        return
    finally:
        lock.release()


# -- reading ------------------------------------------------------------------------------------


def _mode() -> str:
    mode = os.environ.get(ENV, "auto")
    if mode not in MODES:
        raise StoreError(f"{ENV}={mode!r} is not a cache mode; use one of {', '.join(MODES)}")
    return mode


def _table(store: ResultsStore, kind: _Kind, columns: list[str] | None = None) -> "pa.Table":
    """The kind's records (only `columns`, if given), migrated, in file order, duplicates included."""
    import pyarrow as pa

    path = kind.path(store)
    mode = _mode()
    empty = _select(_schema(kind), columns).empty_table()
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return empty
    except OSError as exc:
        raise StoreError(f"{path}: reading failed ({exc.strerror}); check the disk and the file") from None
    try:
        end = os.fstat(fd).st_size
        cache_dir = store.root / CACHE_DIR
        on_disk, valid, at, base, cached = None, False, _Position(), [], []
        use = mode == "on" or (
            mode == "auto" and (end >= MIN_BYTES or _manifest_path(cache_dir, kind).exists())
        )
        if use:
            # A concurrent saver may merge the parts between reading its manifest and them: again.
            for _ in range(3):
                on_disk = _read_manifest(cache_dir, kind)
                if on_disk is None or not _matches(on_disk, fd):
                    break
                parts = _read_parts(cache_dir, on_disk, kind, columns)
                if parts is not None:
                    valid, base, cached = True, list(on_disk["parts"]), parts
                    at = _Position(on_disk["offset"], on_disk["lines"], on_disk["records"])
                    break
        with paused_gc():
            new, pos = _parse(fd, path, kind, at, end)
        if use and (not valid or pos.offset != at.offset):
            _save(cache_dir, kind, fd, on_disk, base, new, pos)
        if columns is not None:
            new = [table.select(columns) for table in new]
        return pa.concat_tables([empty, *cached, *new])
    finally:
        os.close(fd)


def scored(store: ResultsStore, columns: list[str] | None = None) -> "pa.Table":
    """The scored records of `store` (RUN_COLUMNS, or only `columns`), the first of each run id.

    As `rig.store.migrate.read_runs`: records are migrated, a torn last line is skipped, later records of
    a run id already seen are dropped and reported in one DuplicateRunWarning. Raises StoreError
    for an unreadable file and RecordSchemaError for a record of a newer rig.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    table = _table(store, RUNS, None if columns is None else list(dict.fromkeys(["run_id", *columns])))
    if pc.count_distinct(table.column("run_id")).as_py() == table.num_rows:
        return table if columns is None else table.select(columns)
    seen: set[str] = set()
    keep: list[bool] = []
    dropped: Counter[str] = Counter()
    with paused_gc():
        run_ids = table.column("run_id").to_pylist()
    for run_id in run_ids:
        if run_id in seen:
            dropped[run_id] += 1
            keep.append(False)
        else:
            seen.add(run_id)
            keep.append(True)
    if dropped:
        warn_duplicates(store.runs_path, dropped)
        table = table.filter(pa.array(keep))
    return table if columns is None else table.select(columns)


def quarantined(store: ResultsStore) -> "pa.Table":
    """The infrastructure-failure records of `store` (QUARANTINE_COLUMNS), every attempt counted."""
    return _table(store, QUARANTINE)


def report_table(store: ResultsStore) -> "pa.Table":
    """The scored records of `store` as `scored` keeps them, in the columns `rig report` reads
    (rig.store.columns.REPORT_COLUMNS). Kept as columns: a report of 100,000 runs groups them in
    Arrow and makes Python objects only of its failed runs (`failure_details`)."""
    return scored(store, list(REPORT_COLUMNS))


# A relative path that os.path.normpath would change (empty, absolute, `//`, `.` or `..` parts, a
# trailing slash); the rig writes none of them, so normpath runs only where one turns up.
_NOT_NORMAL = r"^$|^/|//|/$|(^|/)\.\.?(/|$)"


def absolute_artifacts(folder: Path, table: "pa.Table") -> list[str]:
    """The absolute attempt folders of a results folder's records (`table` holds `artifacts`): each
    record's relative path below the results folder's real path, normalised without following links
    inside it (attempt folders are never followed out), which is one system call per folder, not
    per run; joined in Arrow, since a normpath per run costs half a second at 100,000 runs."""
    import pyarrow.compute as pc

    root = os.path.realpath(folder)
    rel = pc.fill_null(table.column("artifacts"), "")
    paths = pc.binary_join_element_wise(root, rel, "/").to_pylist()
    odd = pc.match_substring_regex(rel, _NOT_NORMAL)
    for i in pc.indices_nonzero(odd).to_pylist():
        paths[i] = os.path.normpath(os.path.join(root, rel[i].as_py()))
    return paths


def failure_details(folder: Path, table: "pa.Table") -> dict[str, Record]:
    """What failures.md reads of each failed run of a `report_table`: its condition, the sub-keys of
    rig.store.columns.VIEW_NESTED and `verify_error`, keyed by its absolute attempt folder
    (`absolute_artifacts`)."""
    import pyarrow.compute as pc

    failed = table.filter(pc.invert(table.column("success")))
    paths = absolute_artifacts(folder, failed)
    columns = [failed.column(key).to_pylist() for key in ("artifacts", "condition", "view")]
    with paused_gc():
        return {
            path: {"condition": condition, **_loads(view.encode())}
            for path, (rel, condition, view) in zip(paths, zip(*columns, strict=True), strict=True)
            if rel
        }

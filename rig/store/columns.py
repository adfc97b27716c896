"""The columns rig's readers take of a record, each declared once: its name, its type and how it is read.

`RUN_COLUMNS` is the table of a scored run (runs.jsonl). From it come the Arrow schema of the
columnar cache and the values it keeps of each record (rig.store.runs_cache), the columns of
`load_runs`' frame (`FRAME_COLUMNS`, rig.analysis.load) and the columns `rig report` reads
(`REPORT_COLUMNS`). A new field a reader needs is one `Column` here; the cache rebuilds itself,
as this module is part of the code its manifest names.

A column's `read` takes one record, already migrated (rig.store.migrate), and returns its value of
the column's type (None where it is unknown, NaN for a float). It raises `Unfit` (or KeyError,
TypeError, ValueError) for a record the readers cannot use: the cache then names the record as
edited by hand. Reads run once per column of every record a cache indexes, so the common ones are
made by small factories that do their work in one call.

pyarrow is imported only to make a schema: this module is imported wherever the store is.
"""

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import pyarrow as pa

Record = dict[str, Any]
Kind = Literal["str", "int", "float", "bool", "list"]


class Unfit(Exception):
    """A record that lacks a field every reader needs, or has one of the wrong type."""


@dataclass(frozen=True)
class Column:
    """One column of the cache: `name`, `type` (its Arrow type by `arrow_type`; a list is of strings),
    and `read`, its value in one migrated record. `frame`: a column of load_runs' frame; `report`: one
    that `rig report` reads of the records (its design and pins sections, failures.md)."""

    name: str
    type: Kind
    read: Callable[[Record], Any]
    frame: bool = True
    report: bool = False

    def arrow_type(self) -> "pa.DataType":
        """The column's type in Arrow (and so in the Parquet parts of the cache)."""
        import pyarrow as pa

        if self.type == "list":
            return pa.list_(pa.string())
        return {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}[self.type]


def schema(columns: tuple[Column, ...]) -> "pa.Schema":
    """The Arrow schema of `columns`, in their order."""
    import pyarrow as pa

    return pa.schema([(column.name, column.arrow_type()) for column in columns])


# -- how a value is read ------------------------------------------------------------------------


def _str(value: Any) -> str | None:
    # The readers of plain text fields below do this check inline: one call per column, not two.
    if value is not None and not isinstance(value, str):
        raise Unfit(f"holds a {type(value).__name__} where a string belongs ({value!r})")
    return value


def _json(value: Any) -> str:
    import orjson

    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, sort_keys=True)  # NaN, or an integer beyond 64 bits


def _metrics(record: Record) -> Record:
    return record.get("metrics") or {}


def _pins(record: Record) -> Record:
    return record.get("pins") or {}


def _count(key: str) -> Callable[[Record], int | None]:
    """A count of the record's metrics, 0 where the harness recorded none; for an imported record
    (`source`), None where its source did not report it: an unreported figure is never a zero."""

    def read(record: Record) -> int | None:
        value = (record.get("metrics") or {}).get(key)
        if value is None:
            return None if record.get("source") else 0
        return int(value)

    return read


def _flag(key: str) -> Callable[[Record], bool | None]:
    """A flag of the record's metrics, False where the harness recorded none; None for an imported
    record (`source`) whose source does not report it."""

    def read(record: Record) -> bool | None:
        value = (record.get("metrics") or {}).get(key)
        if value is None:
            return None if record.get("source") else False
        return bool(value)

    return read


def _observed(read: Callable[[Record], Any]) -> Callable[[Record], Any]:
    """`read` of what the rig observes of a run itself (its process, the docs it read, the protected
    files): None for an imported record (`source`), whose source never told."""

    def observed(record: Record) -> Any:
        return None if record.get("source") else read(record)

    return observed


def _source_kind(record: Record) -> str | None:
    """The format an imported record was read from (rig.schema.RecordSource.kind); None: measured here."""
    source = record.get("source")
    if source is None:
        return None
    if not isinstance(source, dict) or not isinstance(source.get("kind"), str):
        raise Unfit(f"holds {source!r} where a record's source belongs")
    return source["kind"]


def _score(record: Record) -> float:
    """Partial credit in [0, 1]; NaN where the outcome is binary (every record of this rig)."""
    score = record.get("score")
    return float(score) if score is not None else math.nan


def _seconds(value: Any) -> float:
    # An imported record's source may record no times (None): NaN, as for a missing field.
    return float(value) if value is not None else math.nan


def _pin(key: str) -> Callable[[Record], str | None]:
    def read(record: Record) -> str | None:
        value = (record.get("pins") or {}).get(key)
        if value is not None and not isinstance(value, str):
            raise Unfit(f"holds a {type(value).__name__} where a string belongs ({value!r})")
        return value

    return read


def _text(key: str) -> Callable[[Record], str | None]:
    """A text field every record has."""

    def read(record: Record) -> str | None:
        value = record[key]
        if value is not None and not isinstance(value, str):
            raise Unfit(f"holds a {type(value).__name__} where a string belongs ({value!r})")
        return value

    return read


def _optional_text(key: str) -> Callable[[Record], str | None]:
    def read(record: Record) -> str | None:
        value = record.get(key)
        if value is not None and not isinstance(value, str):
            raise Unfit(f"holds a {type(value).__name__} where a string belongs ({value!r})")
        return value

    return read


def _per_record(compute: Callable[[Record], Any]) -> Callable[[Record], Any]:
    """`compute`, run once per record for the several columns that read its result: the cache reads
    a record's columns one after the other, and never changes a record while reading it, so the last
    record's result is kept (as one tuple, which threads reading at once replace whole)."""
    last: list[tuple[Record | None, Any]] = [(None, None)]

    def read(record: Record) -> Any:
        seen, value = last[0]
        if seen is not record:
            value = compute(record)
            last[0] = (record, value)
        return value

    return read


def _cost(record: Record) -> float:
    cost = _metrics(record).get("cost_usd")
    return float(cost) if cost is not None else math.nan


def _main_model(metrics: Record) -> tuple[int | None, float, list[str]]:
    """The main model's tokens and cost and the other models' names, from `per_model`; (None, NaN, [])
    where the harness recorded one total. The main model is the one the session says answered
    (`metrics.model`), else the one with the most tokens."""
    per_model = metrics.get("per_model")
    if not isinstance(per_model, dict) or not per_model:
        return None, math.nan, []
    parts = {str(k): v for k, v in per_model.items() if isinstance(v, dict)}
    if not parts:
        return None, math.nan, []
    named = metrics.get("model")
    main = named if named in parts else max(parts, key=lambda m: int(parts[m].get("total_tokens") or 0))
    cost = parts[main].get("cost_usd")
    return (
        int(parts[main].get("total_tokens") or 0),
        float(cost) if isinstance(cost, int | float) else math.nan,
        sorted(m for m in parts if m != main),
    )


@_per_record
def _docs(record: Record) -> list[Any]:
    return list(_metrics(record).get("docs_read") or [])


@_per_record
def _touched(record: Record) -> list[str]:
    """The protected files the agent modified, added or deleted (restored before verification)."""
    protected = record.get("protected") or {}
    return sorted({str(p) for key in ("modified", "added", "deleted") for p in (protected.get(key) or [])})


_models = _per_record(lambda record: _main_model(_metrics(record)))


def _tried_other_host(record: Record) -> bool | None:
    """Whether the policy refused any connection of the agent; None where its network was not
    confined (policy open, or a record older than network control): nothing was there to refuse."""
    network = record.get("network")
    if not isinstance(network, dict) or not network.get("active"):
        return None
    refused = network.get("refused")
    entries = refused if isinstance(refused, list) else []
    return any(isinstance(e, dict) and isinstance(n := e.get("connections"), int) and n > 0 for e in entries)


def sealed(record: Record) -> bool | None:
    """Whether the run's agent ran in an active sandbox (the record's `sandbox.active`): False, it
    could read the hidden tests, the reference solutions and any copy of the project on the machine,
    and its success is no evidence (docs/confinement.md). None where the record carries no verdict:
    an imported record (`source`), whose source never told, or one without a sandbox (none, or null:
    older than the field)."""
    if record.get("source"):
        return None
    sandbox = record.get("sandbox")
    active = sandbox.get("active") if isinstance(sandbox, dict) else None
    return active if isinstance(active, bool) else None


def is_unsealed(record: Record) -> bool:
    """Whether the record says its agent ran without the sandbox (`sealed` is False); never for a
    record without a verdict."""
    return sealed(record) is False


def _out_of_scope(record: Record) -> int | None:
    """How many changes fell outside the task's scope; None for a task without one."""
    changes = record.get("out_of_scope")
    return len(changes) if isinstance(changes, list) else None


def _compactions(record: Record) -> int | None:
    """The run's context compactions; None where its harness's session does not record them."""
    count = _metrics(record).get("compactions")
    return count if isinstance(count, int) and not isinstance(count, bool) else None


# Of the nested fields, the sub-keys failures.md reads, kept with `verify_error` as a little JSON
# object per record (the column `view`).
VIEW_NESTED = {"hidden": ("failed", "error"), "check": ("failed",)}


def _view(record: Record) -> str:
    view = {"verify_error": record["verify_error"]} if "verify_error" in record else {}
    for key, subkeys in VIEW_NESTED.items():
        if key in record:
            value = record[key]
            view[key] = {s: value[s] for s in subkeys if s in value} if isinstance(value, dict) else value
    return _json(view)


# -- the tables ---------------------------------------------------------------------------------

# The columns of one scored run. `artifacts` is the attempt folder relative to the results folder
# (load_runs makes it absolute); `view`, `pins` (the record's pins, whole, as JSON) and
# `reported_model` (the model the harness reported, `metrics.model`) are read by `rig report` alone.
RUN_COLUMNS: tuple[Column, ...] = (
    Column("experiment", "str", _text("experiment"), report=True),
    Column("run_id", "str", _text("run_id"), report=True),
    Column("task", "str", _text("task"), report=True),
    Column("condition", "str", _text("condition"), report=True),
    Column("repetition", "int", lambda r: int(r["repetition"]), report=True),
    Column("attempt", "int", lambda r: int(r.get("attempt", 1)), report=True),
    Column("success", "bool", lambda r: bool(r["success"]), report=True),
    # Partial credit in [0, 1] (imported records); NaN for a binary outcome.
    Column("score", "float", _score),
    # A further stratum (a harness-model configuration of an import); None where there is none.
    Column("group", "str", _optional_text("group"), report=True),
    # The format an imported record was read from (inspect, harbor, atif, table); None: measured here.
    Column("source", "str", _source_kind, report=True),
    Column("failing_stage", "str", _optional_text("failing_stage"), report=True),
    # NaN when the harness reported no cost.
    Column("cost_usd", "float", _cost),
    Column("input_tokens", "int", _count("input_tokens")),
    Column("output_tokens", "int", _count("output_tokens")),
    Column("cache_read_tokens", "int", _count("cache_read_tokens")),
    Column("cache_write_tokens", "int", _count("cache_write_tokens")),
    Column("reasoning_tokens", "int", _count("reasoning_tokens")),
    Column("total_tokens", "int", _count("total_tokens")),
    Column("tool_calls", "int", _count("tool_calls")),
    Column("tool_errors", "int", _count("tool_errors")),
    # False when the parser could not read every usage figure: cost and tokens are a lower bound.
    Column("metrics_complete", "bool", lambda r: _metrics(r).get("complete") is not False),
    Column("main_model_tokens", "int", lambda r: _models(r)[0]),
    Column("main_model_cost_usd", "float", lambda r: _models(r)[1]),
    Column("other_models", "list", lambda r: _models(r)[2]),
    Column("wall_s", "float", lambda r: _seconds(r.get("wall_s"))),
    Column("agent_wall_s", "float", lambda r: _seconds((r.get("agent") or {}).get("wall_s"))),
    Column("timed_out", "bool", _observed(lambda r: bool(r.get("timed_out", False)))),
    Column("stalled", "bool", _observed(lambda r: bool(r.get("stalled", False)))),
    # The agent's own hang, scored as a failure: "agent_hang", "timeout" or "" (none).
    Column("hang", "str", lambda r: str(r.get("hang") or "")),
    Column("ran_check_script", "bool", _flag("ran_check_script")),
    Column("ran_pytest", "bool", _flag("ran_pytest")),
    Column("ran_tests", "bool", _flag("ran_tests")),
    Column("read_docs", "bool", _observed(lambda r: bool(_docs(r)))),
    Column("read_agents_md", "bool", _observed(lambda r: "AGENTS.md" in _docs(r))),
    Column("read_skill", "bool", _flag("read_skill")),
    Column("tampered", "bool", _observed(lambda r: bool(_touched(r)))),
    Column("protected_touched", "list", _touched),
    Column(
        "bash_search_commands", "int", _observed(lambda r: len(_metrics(r).get("bash_search_commands") or []))
    ),
    # False: the agent ran without the sandbox; None: no verdict (imported, or older than the field).
    Column("sealed", "bool", sealed),
    Column("tried_other_host", "bool", _tried_other_host),
    Column("out_of_scope", "int", _out_of_scope),
    Column("compactions", "int", _compactions),
    Column("harness", "str", _optional_text("harness"), report=True),
    Column(
        "harness_version", "str", lambda r: _str(r.get("harness_version", _pins(r).get("harness_version")))
    ),
    Column("model", "str", _optional_text("model"), report=True),
    Column("thinking", "str", _optional_text("thinking")),
    Column("pack", "str", _pin("pack")),
    Column("pack_hash", "str", _pin("pack_hash")),
    Column("fixture_hash", "str", _pin("fixture_hash")),
    Column("task_hash", "str", _pin("task_hash")),
    Column("hidden_tests_hash", "str", _pin("hidden_tests_hash")),
    Column("rig_version", "str", _pin("rig_version")),
    Column("toolchain_hash", "str", _pin("toolchain_hash")),
    Column("environment_hash", "str", _pin("environment_hash")),
    Column("environment_packages", "str", _pin("environment_packages")),
    Column("python_version", "str", _pin("python_version")),
    Column("ruff_version", "str", _pin("ruff_version")),
    Column("pytest_version", "str", _pin("pytest_version")),
    Column("artifacts", "str", lambda r: _str(r.get("artifacts", "")), report=True),
    Column("view", "str", _view, frame=False, report=True),
    Column("pins", "str", lambda r: _json(r["pins"]) if "pins" in r else None, frame=False, report=True),
    Column("reported_model", "str", lambda r: _str(_metrics(r).get("model")), frame=False, report=True),
)

# What is kept of a quarantined attempt (quarantine.jsonl): the cell it belongs to and its run id.
QUARANTINE_COLUMNS: tuple[Column, ...] = tuple(
    Column(key, "str", _optional_text(key), frame=False)
    for key in ("experiment", "run_id", "task", "condition")
)


# The columns of load_runs' frame (rig.analysis.load.COLUMNS) and those `rig report` reads, in order.
FRAME_COLUMNS: tuple[str, ...] = tuple(column.name for column in RUN_COLUMNS if column.frame)
REPORT_COLUMNS: tuple[str, ...] = tuple(column.name for column in RUN_COLUMNS if column.report)

"""Stored results as this rig reads them: every record brought up to the current schema.

runs.jsonl and quarantine.jsonl are append-only evidence and are never rewritten to a new schema;
instead every reader (analysis, `rig status`, `rig report`) migrates each record in memory on read.
`MIGRATIONS[v]` turns a record of schema v into one of schema v + 1; `migrate` chains them up to
`RECORD_SCHEMA_VERSION` and refuses a record newer than this rig knows. A record without
`record_schema` predates the field and is schema 1.

Readers also keep only the first scored record of a run id (`read_runs`): a second one (a second
writer on the same folder, a bad merge of two result sets) is dropped and reported with a
`DuplicateRunWarning`, so it can neither count twice nor pass unnoticed.

A stored design (experiment.json) is compared by recomputing its digest with this rig's rule
(`design_digest`), so a change in what the digest covers (e.g. `workers` no longer does) never
orphans results written before it.
"""

import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rig.schema import RECORD_SCHEMA_VERSION, Experiment
from rig.store.results import ResultsStore

Record = dict[str, Any]


class RecordSchemaError(ValueError):
    """A record this rig cannot read: a newer schema, or a record_schema that is not a version."""


class DuplicateRunWarning(UserWarning):
    """runs.jsonl holds more than one scored record of a run id; all but the first were dropped."""


def _v1_to_v2(record: Record) -> Record:
    # Schema 2 added what the agent left in the workspace, the rig's own errors, and the agent's
    # own hang; a silence is infra only while the harness waits for the model ("stalled_provider").
    # Schema 1 knew no tool-call hang: a timed-out run was the agent's timeout, a stall was infra.
    record.setdefault("workspace", None)
    record.setdefault("rig_error", None)
    record.setdefault("hang", "timeout" if record.get("timed_out") else None)
    infra = record.get("infra")
    if isinstance(infra, dict) and infra.get("rule") == "stalled":
        record["infra"] = {**infra, "rule": "stalled_provider"}
    return record


def _v2_to_v3(record: Record) -> Record:
    # Schema 3 added task packs: which pack a run measured, and whether the agent ran the pack's
    # tests with any runner. Before packs every run was on the built-in pack, whose runner is pytest.
    # The nested fields are new dicts: migrate never changes the record it was given.
    pins = record.get("pins")
    if isinstance(pins, dict):
        record["pins"] = {"pack": None, "pack_hash": None, **pins}
    metrics = record.get("metrics")
    if isinstance(metrics, dict):
        record["metrics"] = {"ran_tests": bool(metrics.get("ran_pytest")), **metrics}
    return record


def _v3_to_v4(record: Record) -> Record:
    # Schema 4 added the Dask worker that ran an attempt; every earlier run ran in the rig's process.
    record.setdefault("worker", None)
    return record


def _v4_to_v5(record: Record) -> Record:
    # Schema 5 added the agent's network policy and what its connections did. Earlier runs had no
    # egress control: whatever the machine's network allowed, unrecorded, which None says.
    record.setdefault("network", None)
    return record


# What an older record's metrics say when they hold the silent zeros schema 6 names (see _v5_to_v6).
LEGACY_ZEROS_GAP = (
    "recorded before parsers reported gaps: no tokens although the model responded; "
    "`rig reclassify EXP --write` re-parses the session"
)


def _v5_to_v6(record: Record) -> Record:
    # Schema 6 added tokens and cost per model (`metrics.per_model`, empty before: one total) and
    # whether the metrics are complete (`metrics.complete`, `metrics.gaps`). Older
    # parsers never said; their metrics stand as complete except where they show the silent zeros
    # that made the field necessary: no token at all although the model called tools or answered
    # (Codex rollouts of 0.40-0.125 read as zero). Marking every older record unknown instead
    # would drop exact numbers from every comparison; re-parsing settles the marked ones.
    metrics = record.get("metrics")
    if isinstance(metrics, dict) and "complete" not in metrics:
        responded = bool(
            metrics.get("tool_calls") or metrics.get("assistant_messages") or metrics.get("final_text")
        )
        zeros = responded and not metrics.get("total_tokens") and not metrics.get("output_tokens")
        gaps = [LEGACY_ZEROS_GAP] if zeros else []
        record["metrics"] = {"per_model": {}, **metrics, "complete": not zeros, "gaps": gaps}
    return record


def _v6_to_v7(record: Record) -> Record:
    # Schema 7 added the changes outside the task's scope; no task had a scope before.
    record.setdefault("out_of_scope", None)
    return record


def _v7_to_v8(record: Record) -> Record:
    # Schema 8 added the run budget: no agent was stopped at one before.
    agent = record.get("agent")
    if isinstance(agent, dict):
        record["agent"] = {"budget": None, **agent}
    return record


# The metrics fields schema 9 added (see _v8_to_v9).
COMPACTION_FIELDS = (
    "compactions",
    "compaction_tokens_before",
    "compaction_tokens_after",
    "compaction_tokens",
)


def _v8_to_v9(record: Record) -> Record:
    # Schema 9 added the context compactions the session records and what they cost. Older parsers
    # never read them: unknown, even where the saved session holds them (`rig reclassify EXP
    # --write` re-parses it). A new dict: migrate never changes the record it was given.
    metrics = record.get("metrics")
    if isinstance(metrics, dict):
        unknown = dict.fromkeys(COMPACTION_FIELDS)
        record["metrics"] = {**unknown, **metrics}
    return record


def _v9_to_v10(record: Record) -> Record:
    # Schema 10 added the end of a harness silent after its final answer: no rig ended one before.
    agent = record.get("agent")
    if isinstance(agent, dict):
        record["agent"] = {"ended_after_final": False, **agent}
    return record


def _v10_to_v11(record: Record) -> Record:
    # Schema 11 added the end of a harness that kept retrying a failing provider: none before.
    agent = record.get("agent")
    if isinstance(agent, dict):
        record["agent"] = {"failed_requests": None, **agent}
    return record


def _v11_to_v12(record: Record) -> Record:
    # Schema 12 added imported records (`rig import`): where one came from, its partial credit and a
    # further stratum. Every earlier record was measured by this rig, binary, with no stratum.
    record.setdefault("source", None)
    record.setdefault("score", None)
    record.setdefault("group", None)
    return record


MIGRATIONS: dict[int, Callable[[Record], Record]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
    6: _v6_to_v7,
    7: _v7_to_v8,
    8: _v8_to_v9,
    9: _v9_to_v10,
    10: _v10_to_v11,
    11: _v11_to_v12,
}


def schema_of(record: Record) -> int:
    """The record's schema version (1 when it has none); raises RecordSchemaError if not a version."""
    schema = record.get("record_schema", 1)
    if isinstance(schema, bool) or not isinstance(schema, int) or schema < 1:
        raise RecordSchemaError(
            f"record_schema {schema!r} is not a schema version; the file was edited by hand? "
            "restore it from a backup"
        )
    return schema


def migrate(record: Record) -> Record:
    """`record` brought up to RECORD_SCHEMA_VERSION, as a new dict (the argument is left as is).

    Raises RecordSchemaError for a record written by a newer rig: reading it as this version's
    schema could silently misread a field whose meaning changed.
    """
    schema = schema_of(record)
    if schema > RECORD_SCHEMA_VERSION:
        raise RecordSchemaError(
            f"record_schema {schema} is newer than this rig reads ({RECORD_SCHEMA_VERSION}); "
            "upgrade rig (git pull, then make setup) to read these results"
        )
    # Steps replace the nested dicts they change, so a shallow copy keeps the argument intact.
    migrated = dict(record)
    for version in range(schema, RECORD_SCHEMA_VERSION):
        migrated = MIGRATIONS[version](migrated)
    migrated["record_schema"] = RECORD_SCHEMA_VERSION
    return migrated


def _migrate_all(records: list[Record], source: str) -> list[Record]:
    out = []
    for number, record in enumerate(records, start=1):
        try:
            out.append(migrate(record))
        except RecordSchemaError as exc:
            raise RecordSchemaError(f"{source}: record {number} ({record.get('run_id')}): {exc}") from None
    return out


def read_runs(store: ResultsStore) -> list[Record]:
    """The scored records of `store`, migrated, the first record of each run id only.

    Later records of a run id already seen are dropped and reported in one DuplicateRunWarning per
    file (shown by notebooks; `rig report` and `rig status` print it as a `warning:` line).
    Raises StoreError for an unreadable file and RecordSchemaError for a record of a newer rig.
    """
    records = _migrate_all(store.read_runs(), str(store.runs_path))
    kept: list[Record] = []
    seen: set[Any] = set()
    dropped: Counter[str] = Counter()
    for record in records:
        run_id = record.get("run_id")
        if run_id in seen:
            dropped[str(run_id)] += 1
            continue
        seen.add(run_id)
        kept.append(record)
    if dropped:
        warn_duplicates(store.runs_path, dropped)
    return kept


def warn_duplicates(path: Path, dropped: Counter[str]) -> None:
    """One DuplicateRunWarning for the later records of run ids already seen in `path`."""
    listed = ", ".join(f"{run_id} (+{n})" for run_id, n in sorted(dropped.items())[:5])
    more = f" and {len(dropped) - 5} more" if len(dropped) > 5 else ""
    warnings.warn(
        f"{path}: dropped {sum(dropped.values())} duplicate records of "
        f"{len(dropped)} run ids, keeping the first of each: {listed}{more}; "
        "was the folder written by two runners or merged twice?",
        DuplicateRunWarning,
        stacklevel=3,
    )


def read_quarantine(store: ResultsStore) -> list[Record]:
    """The infrastructure-failure records of `store`, migrated (every attempt counts: no dedup)."""
    return _migrate_all(store.read_quarantine(), str(store.quarantine_path))


def migrate_design(design: Any) -> Any:
    """A stored experiment.json design as this rig reads it. One stored before `estimand` that has a
    [stopping] table asked about these tasks (the sequential test adds repetitions of the same
    tasks and can decide only about them; such a design must now say so), the others about the
    population (the field's default)."""
    if isinstance(design, dict) and "estimand" not in design and design.get("stopping"):
        return {**design, "estimand": "these_tasks"}
    return design


def design_digest(stored: Record) -> str | None:
    """The digest of a stored experiment.json design (`migrate_design`) under this rig's
    `Experiment.digest` rule.

    Falls back to the digest stored with it when this rig cannot validate the old design (a field
    since removed): such a design then compares as different, which is the safe answer.
    """
    design = migrate_design(stored.get("experiment"))
    try:
        return Experiment.model_validate(design).digest()
    except ValidationError:
        digest = stored.get("digest")
        return digest if isinstance(digest, str) else None

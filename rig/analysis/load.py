"""Scored runs of one or more results folders as one tidy DataFrame, with the pins checked.

Only records in runs.jsonl are scored; quarantined infrastructure failures never enter the
statistics (they are counted separately by `infra_summary`, so a report can show how many runs
the provider cost each cell). Pooling runs is only meaningful when they measured the same thing:
`load_runs` refuses to mix records whose fixture, task, hidden tests, harness version, model, rig
version or verifying toolchain differ (see `_PIN_SCOPES`), unless the caller says so explicitly.

Records are read through `rig.migrate`: older schemas are migrated on read, a record of a newer rig
is refused, and a run id recorded twice counts once (the first record), with a DuplicateRunWarning.
"""

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rig.migrate import DuplicateRunWarning, read_quarantine, read_runs
from rig.store import ResultsStore

COLUMNS: tuple[str, ...] = (
    "experiment",
    "run_id",
    "task",
    "condition",
    "repetition",
    "attempt",
    "success",
    "failing_stage",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "total_tokens",
    "tool_calls",
    "tool_errors",
    "wall_s",
    "agent_wall_s",
    "timed_out",
    "stalled",
    "hang",
    "ran_check_script",
    "ran_pytest",
    "ran_tests",
    "read_docs",
    "read_agents_md",
    "read_skill",
    "tampered",
    "protected_touched",
    "bash_search_commands",
    "harness",
    "harness_version",
    "model",
    "thinking",
    "pack",
    "pack_hash",
    "fixture_hash",
    "task_hash",
    "hidden_tests_hash",
    "rig_version",
    "toolchain_hash",
    "python_version",
    "ruff_version",
    "pytest_version",
    "artifacts",
)

INFRA_COLUMNS: tuple[str, ...] = ("experiment", "task", "condition", "infra_reruns", "quarantined")

# Which pin must agree within which group of rows: None means across every row. The pack (its
# manifest: the gate, the runner, the protected paths) and its fixture are one project for the whole
# comparison; a task's prompt and its hidden tests define what "success on
# that task" means; the harness version and the model are part of what an arm is. The rig's own
# code and the toolchain that verifies (interpreter, ruff, pytest, their startup hooks) are the
# judge: one judge for every run, or a difference between arms may be a difference between judges.
_PIN_SCOPES: tuple[tuple[str, str | None], ...] = (
    ("pack_hash", None),
    ("fixture_hash", None),
    ("task_hash", "task"),
    ("hidden_tests_hash", "task"),
    ("harness_version", "condition"),
    ("model", "condition"),
    ("rig_version", None),
    ("toolchain_hash", None),
    ("python_version", None),
    ("ruff_version", None),
    ("pytest_version", None),
)


class PoolingError(Exception):
    """Records that measured different things (a differing pin) were about to be pooled."""


def _folders(results: Path | str | Sequence[Path | str]) -> list[Path]:
    # A str is itself a Sequence; treat it (and any path-like) as one folder.
    if isinstance(results, str | os.PathLike):
        return [Path(results)]
    folders = [Path(p) for p in results]
    if not folders:
        raise ValueError("no results folder given")
    seen: set[Path] = set()
    for folder in folders:
        # The same runs twice would count every run twice and halve every p-value's honesty.
        if folder.resolve() in seen:
            raise ValueError(f"results folder {folder} is given twice")
        seen.add(folder.resolve())
    return folders


def _store(folder: Path) -> ResultsStore:
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a results folder (no such directory); run `rig run` first")
    return ResultsStore(folder)


def _declared(folder: Path) -> tuple[list[str], list[str]]:
    """Condition names and task ids in the order experiment.json declares them ([] if unknown)."""
    try:
        design = json.loads((folder / "experiment.json").read_text()).get("experiment", {})
    except (OSError, ValueError, AttributeError):
        return [], []
    conditions = [c.get("name") for c in design.get("conditions", []) if isinstance(c, dict)]
    tasks = design.get("tasks")
    return [c for c in conditions if isinstance(c, str)], tasks if isinstance(tasks, list) else []


def _row(record: dict[str, Any], folder: Path) -> dict[str, Any]:
    metrics = record.get("metrics") or {}
    pins = record.get("pins") or {}
    protected = record.get("protected") or {}
    agent = record.get("agent") or {}
    touched = sorted({str(p) for key in ("modified", "added", "deleted") for p in (protected.get(key) or [])})
    docs = list(metrics.get("docs_read") or [])
    cost = metrics.get("cost_usd")
    return {
        "experiment": record["experiment"],
        "run_id": record["run_id"],
        "task": record["task"],
        "condition": record["condition"],
        "repetition": int(record["repetition"]),
        "attempt": int(record.get("attempt", 1)),
        "success": bool(record["success"]),
        "failing_stage": record.get("failing_stage"),
        "cost_usd": float(cost) if cost is not None else np.nan,
        "input_tokens": int(metrics.get("input_tokens", 0)),
        "output_tokens": int(metrics.get("output_tokens", 0)),
        "cache_read_tokens": int(metrics.get("cache_read_tokens", 0)),
        "cache_write_tokens": int(metrics.get("cache_write_tokens", 0)),
        "reasoning_tokens": int(metrics.get("reasoning_tokens", 0)),
        "total_tokens": int(metrics.get("total_tokens", 0)),
        "tool_calls": int(metrics.get("tool_calls", 0)),
        "tool_errors": int(metrics.get("tool_errors", 0)),
        "wall_s": float(record.get("wall_s", np.nan)),
        "agent_wall_s": float(agent.get("wall_s", np.nan)),
        "timed_out": bool(record.get("timed_out", False)),
        "stalled": bool(record.get("stalled", False)),
        # The agent's own hang, scored as a failure: "agent_hang", "timeout" or "" (none).
        "hang": str(record.get("hang") or ""),
        "ran_check_script": bool(metrics.get("ran_check_script", False)),
        "ran_pytest": bool(metrics.get("ran_pytest", False)),
        "ran_tests": bool(metrics.get("ran_tests", False)),
        "read_docs": bool(docs),
        "read_agents_md": "AGENTS.md" in docs,
        "read_skill": bool(metrics.get("read_skill", False)),
        "tampered": bool(touched),
        "protected_touched": touched,
        "bash_search_commands": len(metrics.get("bash_search_commands") or []),
        "harness": record.get("harness"),
        "harness_version": record.get("harness_version", pins.get("harness_version")),
        "model": record.get("model"),
        "thinking": record.get("thinking"),
        "pack": pins.get("pack"),
        "pack_hash": pins.get("pack_hash"),
        "fixture_hash": pins.get("fixture_hash"),
        "task_hash": pins.get("task_hash"),
        "hidden_tests_hash": pins.get("hidden_tests_hash"),
        "rig_version": pins.get("rig_version"),
        "toolchain_hash": pins.get("toolchain_hash"),
        "python_version": pins.get("python_version"),
        "ruff_version": pins.get("ruff_version"),
        "pytest_version": pins.get("pytest_version"),
        "artifacts": (folder / record.get("artifacts", "")).resolve(),
    }


def _show(value: Any) -> str:
    # Hashes are 64 hex digits; 12 tell them apart on one line.
    text = repr(value)
    return text[:13] + "...'" if isinstance(value, str) and len(value) > 20 else text


def _plain(value: Any) -> Any:
    # pandas may turn a None pin (a model left to the harness default) into NaN; compare as None.
    return None if value is None or (isinstance(value, float) and np.isnan(value)) else value


def _check_pins(df: pd.DataFrame) -> None:
    for pin, scope in _PIN_SCOPES:
        groups = [(None, df)] if scope is None else list(df.groupby(scope, sort=False))
        for key, group in groups:
            seen: dict[Any, list[int]] = {}
            for position, value in enumerate(group[pin].tolist()):
                seen.setdefault(_plain(value), []).append(position)
            if len(seen) <= 1:
                continue
            parts = []
            for value, positions in seen.items():
                first = group.iloc[positions[0]]
                parts.append(
                    f"{_show(value)} ({len(positions)} runs, e.g. {first['experiment']}/{first['run_id']})"
                )
            where = "across the runs" if scope is None else f"within {scope} {key!r}"
            raise PoolingError(
                f"cannot pool runs: {pin} differs {where}: {', '.join(parts)}; "
                "pass --allow-mixed-pins to pool them anyway"
            )


def load_runs(
    results: Path | Sequence[Path],
    *,
    allow_mixed_pins: bool = False,
    arm_by_experiment: bool = False,
) -> pd.DataFrame:
    """One row per scored run (runs.jsonl) of every results folder in `results`.

    Columns are `COLUMNS`: identifiers, the verdict (`success`, `failing_stage`), cost and token
    counts (`cost_usd` is NaN when the harness reported no cost), tool use, times (`wall_s` of the
    whole run, `agent_wall_s` of the agent alone), behaviour flags read from the session
    (`read_agents_md`: AGENTS.md among the docs read; `tampered`: any protected file modified,
    added or deleted, listed in `protected_touched`), the pins, and `artifacts`, the absolute path
    of the attempt folder. A torn last line of runs.jsonl (a crash mid-append) is skipped; records
    of an older schema are migrated (rig.migrate); a run id recorded more than once counts once,
    by its first record, and the others are reported with a `rig.migrate.DuplicateRunWarning`
    (a notebook shows it under the cell; `rig report` prints it as a `warning:` line).

    Rows are ordered by folder, then condition in the order experiment.json declares them, then
    task, repetition and attempt; so "the first condition" (the default reference arm of
    `compare_conditions`) is the first declared one, not whichever the shuffled schedule ran first.
    With `arm_by_experiment`, `condition` holds the experiment name instead (for `rig report
    --vs`: each experiment is one arm, in the order of `results`).

    Raises PoolingError when pack_hash, fixture_hash, rig_version, toolchain_hash, python_version,
    ruff_version or pytest_version differs between any rows, task_hash or hidden_tests_hash within
    a task, or harness_version or model within an arm, unless `allow_mixed_pins`; ValueError when
    there are no scored runs at all; rig.migrate.RecordSchemaError (a ValueError) for a record
    written by a newer rig.
    """
    folders = _folders(results)
    rows: list[dict[str, Any]] = []
    sort_keys: list[tuple[Any, ...]] = []
    condition_rank: dict[str, int] = {}
    experiment_folder: dict[str, Path] = {}
    for folder_index, folder in enumerate(folders):
        records = read_runs(_store(folder))
        declared_conditions, declared_tasks = _declared(folder)
        for name in declared_conditions:
            condition_rank.setdefault(name, len(condition_rank))
        task_rank = {task: i for i, task in enumerate(declared_tasks)}
        for record in records:
            row = _row(record, folder)
            if arm_by_experiment:
                seen = experiment_folder.setdefault(row["experiment"], folder)
                if seen != folder:
                    raise ValueError(
                        f"experiment {row['experiment']!r} is in both {seen} and {folder}; "
                        "comparing experiments arm by arm needs two different experiments"
                    )
                row["condition"] = row["experiment"]
            condition_rank.setdefault(row["condition"], len(condition_rank))
            rows.append(row)
            sort_keys.append(
                (
                    folder_index,
                    condition_rank[row["condition"]],
                    task_rank.get(row["task"], len(task_rank)),
                    row["task"],
                    row["repetition"],
                    row["attempt"],
                    row["run_id"],
                )
            )
    if not rows:
        names = ", ".join(str(f) for f in folders)
        raise ValueError(f"no scored runs in {names}: runs.jsonl is missing or empty; run `rig run` first")
    order = sorted(range(len(rows)), key=sort_keys.__getitem__)
    df = pd.DataFrame([rows[i] for i in order], columns=list(COLUMNS))
    df = df.reset_index(drop=True)
    if not allow_mixed_pins:
        _check_pins(df)
    return df


def infra_summary(results: Path | Sequence[Path]) -> pd.DataFrame:
    """Infrastructure failures per (experiment, task, condition) cell.

    `infra_reruns` counts the records in quarantine.jsonl (each one an attempt lost to the
    provider or the harness, then rerun); `quarantined` counts the run ids that are in quarantine
    and still have no scored record in runs.jsonl (runs missing from the statistics). Every cell
    that has a scored or a quarantined record gets a row, zeros included.
    """
    counts: dict[tuple[str, str, str], list[int]] = {}
    for folder in _folders(results):
        store = _store(folder)
        # Duplicates change nothing here (cells and run ids are sets); load_runs reports them.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DuplicateRunWarning)
            scored = read_runs(store)
        quarantine = read_quarantine(store)
        scored_ids = {(r["experiment"], r["run_id"]) for r in scored}
        for record in scored:
            counts.setdefault((record["experiment"], record["task"], record["condition"]), [0, 0])
        lost: dict[tuple[str, str, str], set[str]] = {}
        for record in quarantine:
            key = (record["experiment"], record["task"], record["condition"])
            counts.setdefault(key, [0, 0])[0] += 1
            if (record["experiment"], record["run_id"]) not in scored_ids:
                lost.setdefault(key, set()).add(record["run_id"])
        for key, ids in lost.items():
            counts[key][1] += len(ids)
    table = [(*key, reruns, missing) for key, (reruns, missing) in counts.items()]
    df = pd.DataFrame(table, columns=list(INFRA_COLUMNS))
    df = df.astype({"infra_reruns": "int64", "quarantined": "int64"})
    return df.sort_values(["experiment", "task", "condition"], kind="stable").reset_index(drop=True)

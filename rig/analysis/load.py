"""Scored runs of one or more results folders as one tidy DataFrame, with the pins checked.

Only records in runs.jsonl are scored; quarantined infrastructure failures never enter the
statistics (they are counted separately by `infra_summary`, so a report can show how many runs
the provider cost each cell). Pooling runs is only meaningful when they measured the same thing:
`load_runs` refuses to mix records whose fixture, task, hidden tests, harness version, model, rig
version or verifying toolchain differ (see `_PIN_SCOPES`), unless the caller says so explicitly.

Records are read through `rig.store.runs_cache` (a columnar cache of runs.jsonl beside it) and
`rig.store.migrate`: older schemas are migrated on read, a record of a newer rig is refused, and a run id
recorded twice counts once (the first record), with a DuplicateRunWarning.
"""

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rig.analysis.stats import POPULATION
from rig.store import runs_cache
from rig.store.columns import FRAME_COLUMNS
from rig.store.migrate import DuplicateRunWarning, migrate_design
from rig.store.results import ResultsStore

if TYPE_CHECKING:
    import pyarrow as pa

# The columns of the frame, declared with how each is read in rig.store.columns.
COLUMNS: tuple[str, ...] = FRAME_COLUMNS

INFRA_COLUMNS: tuple[str, ...] = ("experiment", "task", "condition", "infra_reruns", "quarantined")

# Which pin must agree within which group of rows: None means across every row. The pack (its
# manifest: the gate, the runner, the protected paths) is one project for the whole comparison; a
# task's starting tree (the fixture, or its base when it starts at its fix's parent), its prompt and
# its hidden tests define what "success on that task" means; the harness version and the model are
# part of what an arm is, within its group where an import has one (a harness-model configuration:
# each group of an arm is its own configuration; without groups, `group` is None throughout and the
# arm is the scope). The rig's own code and the toolchain that verifies are the judge: one for every
# run, or a difference between arms may be a difference between judges; the project environment
# the agent and the tests run in (and the interpreter, ruff and pytest it holds) is its task's own
# tree's, one for every run of that task (a task at its parent has the environment of its base).
# An imported record has only the pins its source records (the others are None, one value, as in
# every other record of its import).
_PIN_SCOPES: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("pack_hash", None),
    ("fixture_hash", ("task",)),
    ("task_hash", ("task",)),
    ("hidden_tests_hash", ("task",)),
    ("harness_version", ("condition", "group")),
    ("model", ("condition", "group")),
    ("rig_version", None),
    ("toolchain_hash", None),
    ("environment_hash", ("task",)),
    ("environment_packages", ("task",)),
    ("python_version", ("task",)),
    ("ruff_version", ("task",)),
    ("pytest_version", ("task",)),
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


def _declared(folder: Path) -> tuple[list[str], list[str], str | None]:
    """Condition names and task ids in the order experiment.json declares them ([] if unknown), and
    the estimand it declares (None if unknown)."""
    try:
        design = migrate_design(json.loads((folder / "experiment.json").read_text()).get("experiment", {}))
        conditions = [c.get("name") for c in design.get("conditions", []) if isinstance(c, dict)]
    except (OSError, ValueError, AttributeError):
        return [], [], None
    tasks = design.get("tasks")
    estimand = design.get("estimand")
    return (
        [c for c in conditions if isinstance(c, str)],
        tasks if isinstance(tasks, list) else [],
        estimand if isinstance(estimand, str) else None,
    )


def _show(value: Any) -> str:
    # Hashes are 64 hex digits; 12 tell them apart on one line.
    text = repr(value)
    return text[:13] + "...'" if isinstance(value, str) and len(value) > 20 else text


def _plain(value: Any) -> Any:
    # pandas may turn a None pin (a model left to the harness default) into NaN; compare as None.
    return None if value is None or (isinstance(value, float) and np.isnan(value)) else value


def _check_pins(df: pd.DataFrame) -> None:
    for pin, scope in _PIN_SCOPES:
        # None and NaN are one value here (_plain), as they are to nunique: most pins have one value,
        # and only a pin with several needs the runs listed. A scope's None values (no group) are a
        # group of their own, not dropped.
        keys = list(scope) if scope is not None else []
        distinct = (
            df.groupby(keys, dropna=False)[pin].nunique(dropna=False).max()
            if keys
            else df[pin].nunique(dropna=False)
        )
        if distinct <= 1:
            continue
        groups = list(df.groupby(keys, sort=False, dropna=False)) if keys else [((), df)]
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
            named = [
                f"{column} {value!r}"
                for column, value in zip(keys, key, strict=True)
                if _plain(value) is not None
            ]
            where = f"within {', '.join(named)}" if named else "across the runs"
            raise PoolingError(
                f"cannot pool runs: {pin} differs {where}: {', '.join(parts)}; "
                "pass --allow-mixed-pins to pool them anyway"
            )


def load_runs(
    results: Path | Sequence[Path],
    *,
    allow_mixed_pins: bool = False,
    arm_by_experiment: bool = False,
    paths: bool = True,
) -> pd.DataFrame:
    """One row per scored run (runs.jsonl) of every results folder in `results`.

    Columns are `COLUMNS`: identifiers, the verdict (`success`, `failing_stage`; `score`, partial
    credit in [0, 1], NaN for a binary outcome; `group`, a further stratum an import may have, None
    without one; `source`, the format an imported record was read from, None for a run this rig
    measured: see docs/importing.md), cost and token counts (`cost_usd` is NaN when the harness
    reported no cost; `metrics_complete` is False when the parser could not read every usage figure:
    cost and tokens are then a lower bound;
    `main_model_tokens` and `main_model_cost_usd` are the main model's part where the harness records
    usage per model, else None and NaN, and `other_models` names the side and subagent models), tool
    use, times (`wall_s` of the whole run, `agent_wall_s` of the agent alone), behaviour flags read
    from the session (`read_agents_md`: AGENTS.md among the docs read; `tampered`: any protected
    file modified, added or deleted, listed in `protected_touched`; `sealed`: the agent ran in the
    sandbox, False without it, None where the record says nothing; `tried_other_host`: the network
    policy refused a connection, None where the network was not confined; `out_of_scope`: how many
    changes fell outside the task's scope, None for a task without one; `compactions`: the context
    compactions the session records, None where the harness records none), the pins, and
    `artifacts`, the absolute path of the attempt folder. A figure an imported record's source
    did not report is missing, never 0: NaN in a count column, which is then of float dtype (pandas'
    own conversion of a nullable integer), and None in a flag column (object dtype); a frame of this
    rig's own runs keeps int64 and bool. A torn last line of runs.jsonl (a crash
    mid-append) is skipped; records of an older schema are migrated (rig.store.migrate); a run id
    recorded more than once counts once, by its first record, and the others are reported with a
    `rig.store.migrate.DuplicateRunWarning` (a notebook shows it under the cell; `rig report` prints it
    as a `warning:` line).

    Rows are ordered by folder, then condition in the order experiment.json declares them, then
    task, repetition and attempt. That declared order of the arms is also recorded in
    `df.attrs["conditions"]` (pandas keeps it through filtering, sorting and sampling):
    `compare_conditions`' default reference is its first arm, whatever order the rows are in.
    The estimand the (first) experiment declares is `df.attrs["estimand"]`, which the comparisons
    answer unless told another.
    With `arm_by_experiment`, `condition` holds the experiment name instead (for `rig report
    --vs`: each experiment is one arm, in the order of `results`). With `paths=False`, `artifacts`
    holds the same absolute paths as strings (a Path object per run costs a second at 100,000).

    Flakiness per task is one call on the frame: `rig.analysis.flakiness(df)` gives per condition
    pass^1 .. pass^K (the chance that k runs of a task all pass, averaged over tasks) and the flip
    rate (the share of tasks whose repetitions disagree) with its exact interval over tasks, and
    `rig.analysis.task_flakiness(df)` the same per task (rig.analysis.flakiness).

    Raises PoolingError when pack_hash, fixture_hash, rig_version, toolchain_hash, the project
    environment's hash or packages, python_version, ruff_version or pytest_version differs between
    any rows, task_hash or hidden_tests_hash within a task, or harness_version or model within an
    arm, unless `allow_mixed_pins`; ValueError when there are no scored runs at all;
    rig.store.migrate.RecordSchemaError (a ValueError) for a record written by a newer rig.
    """
    folders = _folders(results)
    with runs_cache.paused_gc():
        df = _load(folders, arm_by_experiment, paths)
    if not allow_mixed_pins:
        _check_pins(df)
    return df


def _load(folders: list[Path], arm_by_experiment: bool, paths: bool) -> pd.DataFrame:
    import pyarrow as pa

    tables = []
    condition_rank: dict[str, int] = {}
    experiment_folder: dict[str, Path] = {}
    estimands: list[str | None] = []
    for folder_index, folder in enumerate(folders):
        table = runs_cache.scored(_store(folder), list(COLUMNS))
        declared_conditions, declared_tasks, estimand = _declared(folder)
        estimands.append(estimand)
        for name in declared_conditions:
            condition_rank.setdefault(name, len(condition_rank))
        experiments = table.column("experiment").to_pylist()
        if arm_by_experiment:
            for name in dict.fromkeys(experiments):
                seen = experiment_folder.setdefault(name, folder)
                if seen != folder:
                    raise ValueError(
                        f"experiment {name!r} is in both {seen} and {folder}; "
                        "comparing experiments arm by arm needs two different experiments"
                    )
            table = table.set_column(
                table.schema.get_field_index("condition"), "condition", table.column("experiment")
            )
        conditions = table.column("condition").to_pylist()
        for name in dict.fromkeys(conditions):
            condition_rank.setdefault(name, len(condition_rank))
        task_rank = {task: i for i, task in enumerate(declared_tasks)}
        tasks = table.column("task").to_pylist()
        keys = zip(
            [condition_rank[c] for c in conditions],
            [task_rank.get(t, len(task_rank)) for t in tasks],
            tasks,
            table.column("repetition").to_pylist(),
            table.column("attempt").to_pylist(),
            table.column("run_id").to_pylist(),
            strict=True,
        )
        tables.append((folder, table, [(folder_index, *key) for key in keys]))
    if not any(len(table) for _, table, _ in tables):
        names = ", ".join(str(f) for f in folders)
        raise ValueError(f"no scored runs in {names}: runs.jsonl is missing or empty; run `rig run` first")
    sort_keys = [key for _, _, keys in tables for key in keys]
    order = sorted(range(len(sort_keys)), key=sort_keys.__getitem__)
    artifacts = [path for folder, table, _ in tables for path in runs_cache.absolute_artifacts(folder, table)]
    combined = pa.concat_tables([table for _, table, _ in tables]).take(pa.array(order, type=pa.int64()))
    df = _frame(combined, [Path(artifacts[i]) if paths else artifacts[i] for i in order])
    # The arms in their declared order, present ones only: compare_conditions' reference is the
    # first of them whatever order the rows are later put in.
    present = set(df["condition"].unique())
    df.attrs["conditions"] = [c for c in condition_rank if c in present]
    # The question the first experiment asks (a design older than the field asked the population's).
    df.attrs["estimand"] = estimands[0] or POPULATION
    return df


def _frame(table: "pa.Table", artifacts: list[Path] | list[str]) -> pd.DataFrame:
    """The rows of `table` as load_runs returns them: COLUMNS, with the dtypes pandas infers from
    the values (a text column with no value at all holds None, as objects)."""
    import pyarrow as pa

    columns: dict[str, Any] = {}
    for name in COLUMNS:
        column = table.column(name)
        if name == "artifacts":
            columns[name] = artifacts  # the cache's relative paths, made absolute
        elif pa.types.is_list(column.type):
            columns[name] = column.to_pylist()
        elif pa.types.is_string(column.type) and column.null_count == len(column):
            columns[name] = np.full(len(column), None, dtype=object)
        else:
            columns[name] = column.to_pandas()
    return pd.DataFrame(columns, columns=list(COLUMNS))


def _columns(table: "pa.Table", names: tuple[str, ...]) -> list[tuple[Any, ...]]:
    return list(zip(*(table.column(name).to_pylist() for name in names), strict=True))


def infra_summary(results: Path | Sequence[Path]) -> pd.DataFrame:
    """Infrastructure failures per (experiment, task, condition) cell.

    `infra_reruns` counts the records in quarantine.jsonl (each one an attempt lost to the
    provider or the harness, then rerun); `quarantined` counts the run ids that are in quarantine
    and still have no scored record in runs.jsonl (runs missing from the statistics). Every cell
    that has a scored or a quarantined record gets a row, zeros included.
    """
    import pyarrow.compute as pc

    key_names = ["experiment", "task", "condition"]
    counts: dict[tuple[str, str, str], list[int]] = {}
    for folder in _folders(results):
        store = _store(folder)
        # Duplicates change nothing here (cells and run ids are sets); load_runs reports them.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DuplicateRunWarning)
            scored = runs_cache.scored(store, ["experiment", "run_id", *key_names[1:]])
        quarantined = runs_cache.quarantined(store)
        quarantine = _columns(quarantined, ("experiment", "run_id", "task", "condition"))
        # Cells grouped in Arrow, and only the scored runs that were ever quarantined made Python tuples.
        for cell in _columns(scored.group_by(key_names).aggregate([]), tuple(key_names)):
            counts.setdefault(cell, [0, 0])
        rerun = pc.is_in(scored.column("run_id"), value_set=pc.unique(quarantined.column("run_id")))
        scored_ids = set(_columns(scored.filter(rerun), ("experiment", "run_id")))
        lost: dict[tuple[str, str, str], set[str]] = {}
        for experiment, run_id, task, condition in quarantine:
            key = (experiment, task, condition)
            counts.setdefault(key, [0, 0])[0] += 1
            if (experiment, run_id) not in scored_ids:
                lost.setdefault(key, set()).add(run_id)
        for key, ids in lost.items():
            counts[key][1] += len(ids)
    table = [(*key, reruns, missing) for key, (reruns, missing) in counts.items()]
    df = pd.DataFrame(table, columns=list(INFRA_COLUMNS))
    df = df.astype({"infra_reruns": "int64", "quarantined": "int64"})
    return df.sort_values(["experiment", "task", "condition"], kind="stable").reset_index(drop=True)

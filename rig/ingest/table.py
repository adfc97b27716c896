"""`rig import table`: a table of outcomes (CSV, JSON, JSONL or Parquet) as runs.

A row is one run (`--success COL`: 0/1, true/false; `--score COL`: a number in [0, --score-max],
partial credit), or one cell's aggregated counts (`--successes COL --trials COL`), which expand into
one run per trial, the successes first, so every reader works on runs as it does on rig's own.
`--task` and `--condition` name the cell's columns, `--group` a further stratum (a harness-model
configuration). A table records no usage, no times and no infrastructure: those figures are None.
"""

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.ingest.common import IngestError, Run, Source, shown_path

FORMATS = {
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_TRUE = {"1", "1.0", "true", "yes"}
_FALSE = {"0", "0.0", "false", "no"}


@dataclass(frozen=True)
class Columns:
    """Which column of the table holds what. Exactly one outcome is given: `success`, `successes` with
    `trials`, or `score` (out of `score_max`)."""

    task: str
    condition: str
    group: str | None = None
    success: str | None = None
    successes: str | None = None
    trials: str | None = None
    score: str | None = None
    score_max: float | None = None

    def check(self) -> None:
        """IngestError unless exactly one outcome is named, whole."""
        given = [self.success is not None, self.successes is not None or self.trials is not None]
        given.append(self.score is not None)
        if sum(given) != 1:
            raise IngestError(
                "give one outcome: --success COL (0/1 per run), --successes COL --trials COL (counts "
                "per cell) or --score COL (partial credit per run)"
            )
        if (self.successes is None) != (self.trials is None):
            raise IngestError("--successes and --trials go together: give both columns")
        if self.score_max is not None and self.score is None:
            raise IngestError("--score-max goes with --score; drop it, or give --score COL")
        if self.score_max is not None and not (self.score_max > 0 and math.isfinite(self.score_max)):
            raise IngestError(f"--score-max {self.score_max} is not a positive number; give the best score")

    def named(self) -> list[str]:
        """Every column named, in the order of the options."""
        names = [self.task, self.condition, self.group, self.success, self.successes, self.trials, self.score]
        return [n for n in names if n is not None]


def _rows(path: Path) -> list[dict[str, Any]]:
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise IngestError(f"{path}: not a table rig reads by its name; give a {', '.join(FORMATS)} file")
    try:
        if kind == "csv":
            with path.open(newline="", encoding="utf-8-sig") as f:
                return list(csv.DictReader(f))
        if kind == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            try:
                return pq.read_table(path).to_pylist()
            except pa.ArrowException as exc:
                raise IngestError(
                    f"{path}: not a Parquet table ({exc}); give the file Parquet wrote"
                ) from None
        text = path.read_text(encoding="utf-8")
        if kind == "jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            rows = json.loads(text)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise IngestError(f"{path}: cannot read it ({exc}); give a readable {kind} file") from None
    except json.JSONDecodeError as exc:
        raise IngestError(f"{path}: not {kind.upper()} ({exc}); give one JSON object per row") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise IngestError(f"{path}: a {kind.upper()} table must hold one object per row; give a list of them")
    return rows


def _text(row: dict[str, Any], column: str, number: int) -> str:
    value = row.get(column)
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        raise IngestError(f"row {number} has no value in column {column!r}; give every row one")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _value(row: dict[str, Any], column: str, number: int, flags: bool = True) -> float:
    """A number of the row; with `flags`, true/false and yes/no too (a success column's)."""
    text = _text(row, column, number)
    raw = row[column]
    if flags and isinstance(raw, bool):
        return 1.0 if raw else 0.0
    lowered = text.strip().lower()
    if flags and lowered in _TRUE:
        return 1.0
    if flags and lowered in _FALSE:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if isinstance(raw, bool) or not math.isfinite(value):
        raise IngestError(f"row {number}: column {column!r} holds {text!r}, not a number; fix the row")
    return value


def _count(row: dict[str, Any], column: str, number: int) -> int:
    value = _value(row, column, number, flags=False)
    if value < 0 or not value.is_integer():
        raise IngestError(f"row {number}: column {column!r} holds {row[column]!r}, not a count; fix the row")
    return int(value)


def _outcome(row: dict[str, Any], columns: Columns, number: int) -> float:
    """The run's outcome in [0, 1]: its success (0/1), or its score over --score-max."""
    if columns.success is not None:
        outcome = _value(row, columns.success, number)
        if outcome not in (0.0, 1.0):
            raise IngestError(
                f"row {number}: success {row[columns.success]!r} is not 0/1; a fractional outcome is "
                "partial credit: give it with --score"
            )
        return outcome
    column = str(columns.score)
    best = columns.score_max or 1.0
    value = _value(row, column, number, flags=False)
    if not 0 <= value <= best:
        raise IngestError(
            f"row {number}: score {row[column]!r} is outside [0, {best:g}]; "
            "give the best possible score with --score-max"
        )
    return value / best


def read_table(path: Path, columns: Columns) -> Source:
    """The runs of the table at `path`; IngestError for a column not in it, a missing value, an
    outcome that is not one (a fractional --success, a score outside [0, --score-max], more
    successes than trials)."""
    columns.check()
    rows = _rows(path)
    if not rows:
        raise IngestError(f"{path} holds no row; give a table with one row per run or per cell")
    present = set().union(*(row.keys() for row in rows))
    for column in columns.named():
        if column not in present:
            listed = ", ".join(sorted(map(str, present))) or "none"
            raise IngestError(f"column {column!r} is not in {path} (its columns: {listed}); name one of them")
    file = shown_path(path)
    runs: list[Run] = []
    for number, row in enumerate(rows, start=1):
        cell = {
            "condition": _text(row, columns.condition, number),
            "task": _text(row, columns.task, number),
            "group": _text(row, columns.group, number) if columns.group else None,
        }
        if columns.successes is not None and columns.trials is not None:
            successes = _count(row, columns.successes, number)
            trials = _count(row, columns.trials, number)
            if successes > trials:
                raise IngestError(
                    f"row {number}: {successes} successes of {trials} trials; fix the row's counts"
                )
            for trial in range(trials):
                item = f"row {number}, trial {trial + 1}"
                outcome = 1.0 if trial < successes else 0.0
                runs.append(Run(**cell, file=file, item=item, outcome=outcome, order=(number, trial)))
            continue
        outcome = _outcome(row, columns, number)
        runs.append(Run(**cell, file=file, item=f"row {number}", outcome=outcome, order=(number,)))
    conditions = list(dict.fromkeys(run.condition for run in runs))
    return Source(kind="table", runs=runs, conditions=conditions, inputs={"table": file})

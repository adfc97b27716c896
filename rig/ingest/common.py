"""What every importer shares: its NAME=PATH inputs, the runs it reads, and the folder it writes.

An importer reads its source into `Run`s; `write_import` makes them records and writes the results
folder (docs/importing.md):

- one record per run (an Inspect sample x epoch, a Harbor trial, a trajectory, a table's run), a
  `rig.schema.ForeignRecord` marked with its `source`, every figure the source does not report None;
- infrastructure (an errored, cancelled or limit-hit sample, a Harbor trial's exception, a run
  without an outcome) goes to quarantine.jsonl, never runs.jsonl, and is excluded symmetrically:
  where one arm's run of a (task, group, repetition) cell is infrastructure, every other arm's run of
  that cell is quarantined with it (rule `paired_exclusion`), so no arm loses runs the others keep;
- the outcome is success where every outcome of the import is 0 or 1, else also a `score` (partial
  credit in [0, 1]) with success meaning full credit;
- run ids are hashes of the cell, the folder holds no time of the import: importing the same inputs
  again writes the same bytes, and leaves a folder that already holds them untouched;
- the folder is written whole beside its place and renamed into it: nothing is ever half-written.
"""

import hashlib
import os
import shutil
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field

from rig.schema import ForeignMetrics, ForeignPins, ForeignRecord, InfraVerdict, RecordSource, SourceKind
from rig.schema.experiment import Estimand
from rig.store.results import ResultsStore

Number = TypeVar("Number", int, float)
# The rule of a run quarantined because another arm's run of its cell is infrastructure.
PAIRED_EXCLUSION = "paired_exclusion"
DESIGN_FILE = "experiment.json"
# What a folder holds that `rig import` wrote: compared when the same import is made again.
WRITTEN_FILES = (DESIGN_FILE, "runs.jsonl", "quarantine.jsonl")


class IngestError(ValueError):
    """Input `rig import` cannot read, or a folder it will not write: one line, the problem and the fix."""


@dataclass(frozen=True)
class Input:
    """One NAME=PATH argument: the condition `name` and the source at `path`."""

    name: str
    path: Path

    @property
    def shown(self) -> str:
        """The path as records name it: as given, relative to the current directory where it lies below."""
        return shown_path(self.path)


def shown_path(path: Path) -> str:
    """`path` as given if relative, else relative to the current directory where it lies below it."""
    if not path.is_absolute():
        return path.as_posix()
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path.as_posix()


def parse_inputs(pairs: Sequence[str], what: str) -> list[Input]:
    """The NAME=PATH arguments, in order; IngestError for one without `=`, an empty or repeated name,
    or a path that does not exist. `what` names the source in the messages ("LOG", "JOB_DIR")."""
    if not pairs:
        raise IngestError(f"no input given; give one NAME={what} per condition")
    inputs: list[Input] = []
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name.strip() or not path:
            raise IngestError(
                f"{pair!r} is not NAME={what}; give each input as a condition name, '=', the path"
            )
        if any(i.name == name for i in inputs):
            raise IngestError(f"condition {name!r} is given twice; give each condition one {what}")
        if not Path(path).exists():
            raise IngestError(
                f"{path}: no such file or folder (condition {name!r}); give the path of a {what}"
            )
        inputs.append(Input(name, Path(path)))
    return inputs


@dataclass
class Run:
    """One run as a source records it, before it becomes a record.

    `outcome` is in [0, 1] (None for infrastructure, `infra` then naming the rule and its detail).
    `repetition` None: numbered from 1 within its (condition, task, group) cell in `order`'s order.
    `attempt`: a run the source's own runner retried (a trajectory `rig export` wrote) has an
    infrastructure attempt before its scored one; the run is then not lost.
    """

    condition: str
    task: str
    file: str
    item: str
    outcome: float | None
    infra: tuple[str, str] | None = None
    repetition: int | None = None
    attempt: int = 1
    group: str | None = None
    harness: str | None = None
    harness_version: str | None = None
    model: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    wall_s: float | None = None
    metrics: ForeignMetrics = field(default_factory=ForeignMetrics)
    pins: ForeignPins = field(default_factory=ForeignPins)
    tool_version: str | None = None
    order: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Source:
    """What one import read: its format, its runs, its conditions in order and its inputs (each
    condition's, or a table's one file)."""

    kind: SourceKind
    runs: list[Run]
    conditions: list[str]
    inputs: dict[str, str]

    @property
    def tool_version(self) -> str | None:
        """The versions of the tool that wrote the inputs, where they say (several: comma-separated)."""
        versions = sorted({run.tool_version for run in self.runs if run.tool_version})
        return ", ".join(versions) or None


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """The seconds from `start` to `end`; None unless both are known."""
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def timestamp(value: object) -> datetime | None:
    """An ISO 8601 time of a source (a trailing Z included), None where absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def integer(value: object) -> int | None:
    """A count of a source: None where it records none (never 0 in its place)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def number(value: object) -> float | None:
    """A figure of a source (a cost, a time): None where it records none."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


# -- the experiment.json an import writes ----------------------------------------------------------


class ImportedCondition(BaseModel):
    name: str


class ImportSource(BaseModel):
    """Where an imported folder's runs came from."""

    kind: SourceKind
    inputs: dict[str, str] = Field(description="each condition's input, as given (a table: its one file)")
    tool_version: str | None = Field(description="the tool that wrote the inputs, where they say")
    imported_by: str = Field(description="the rig that imported them (`rig version`)")


class ImportedDesign(BaseModel):
    """The design of an imported folder: what `load_runs` and `rig report` read of experiment.json."""

    name: str
    conditions: list[ImportedCondition] = Field(description="the reference first, then the others in order")
    reference: str
    estimand: Estimand
    tasks: list[str] = Field(description="in the order first seen")
    source: ImportSource


class ImportedExperiment(BaseModel):
    """experiment.json of an imported folder. No digest: no `rig run` resumes it."""

    experiment: ImportedDesign
    digest: None = None


# -- from runs to records ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """What an import wrote (or found already written, `unchanged`)."""

    folder: Path
    scored: int
    infrastructure: Counter[str]
    excluded: int
    conditions: list[str]
    tasks: int
    unchanged: bool


def _number_repetitions(runs: list[Run]) -> None:
    cells: dict[tuple[str, str, str | None], list[Run]] = {}
    for run in runs:
        if run.repetition is None:
            cells.setdefault((run.condition, run.task, run.group), []).append(run)
    for cell in cells.values():
        for repetition, run in enumerate(sorted(cell, key=lambda r: r.order), start=1):
            run.repetition = repetition
    seen: dict[tuple[str, str, str | None, int | None, int], Run] = {}
    for run in runs:
        key = (run.condition, run.task, run.group, run.repetition, run.attempt)
        if key in seen:
            raise IngestError(
                f"{run.file} ({run.item}) and {seen[key].file} ({seen[key].item}) are both run "
                f"{run.repetition} of task {run.task!r} in condition {run.condition!r}; "
                "give each condition one source of each run"
            )
        seen[key] = run


def run_id(kind: str, run: Run) -> str:
    """A run's id: the same for the same cell of the same kind of source, whenever it is imported."""
    key = "\0".join([kind, run.condition, run.task, run.group or "", str(run.repetition)])
    return f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:20]}"


def _record(
    source: Source, experiment: str, run: Run, fractional: bool, infra: InfraVerdict
) -> dict[str, Any]:
    outcome = run.outcome if run.outcome is not None else 0.0
    record = ForeignRecord(
        experiment=experiment,
        run_id=run_id(source.kind, run),
        attempt=run.attempt,
        task=run.task,
        condition=run.condition,
        repetition=run.repetition or 1,
        harness=run.harness,
        harness_version=run.harness_version,
        model=run.model,
        success=outcome == 1.0,
        score=outcome if fractional and run.outcome is not None else None,
        group=run.group,
        wall_s=run.wall_s,
        started_at=run.started_at,
        finished_at=run.finished_at,
        metrics=run.metrics,
        pins=run.pins,
        infra=infra,
        source=RecordSource(kind=source.kind, file=run.file, item=run.item, tool_version=run.tool_version),
    )
    return record.model_dump(mode="json")


def records(
    source: Source, experiment: str, conditions: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """The scored records, the quarantined ones and the tasks (first seen first) of `source`'s runs.

    Where any arm's run of a (task, group, repetition) cell is infrastructure (no attempt of it was
    scored: a source's rerun after an infrastructure attempt keeps its cell), the other arms' runs of
    that cell are quarantined too (`PAIRED_EXCLUSION`): an arm whose runs fail for the provider more
    often would otherwise keep fewer runs of the tasks it fails on, and the arms would no longer weigh
    the tasks alike. A cell another arm has no run of at all is kept: nothing was lost there.
    """
    runs = source.runs
    _number_repetitions(runs)
    # A run is lost where none of its attempts was scored.
    scored_runs = {(r.condition, r.task, r.group, r.repetition) for r in runs if r.infra is None}
    lost: dict[tuple[str, str | None, int | None], Run] = {}
    for run in runs:
        if run.infra is not None and (run.condition, run.task, run.group, run.repetition) not in scored_runs:
            lost.setdefault((run.task, run.group, run.repetition), run)
    fractional = any(r.infra is None and r.outcome not in (0.0, 1.0) for r in runs)
    rank = {name: i for i, name in enumerate(conditions)}
    tasks = list(dict.fromkeys(run.task for run in runs))
    task_rank = {task: i for i, task in enumerate(tasks)}
    ordered = sorted(
        runs,
        key=lambda r: (rank[r.condition], task_rank[r.task], r.group or "", r.repetition or 0, r.attempt),
    )
    scored, quarantined = [], []
    for run in ordered:
        cause = lost.get((run.task, run.group, run.repetition))
        if run.infra is not None:
            rule, detail = run.infra
            verdict = InfraVerdict(is_infra=True, rule=rule, detail=detail)
            quarantined.append(_record(source, experiment, run, False, verdict))
        elif cause is not None:
            detail = (
                f"excluded with condition {cause.condition!r}'s run of this task and repetition, "
                f"infrastructure ({cause.infra[0] if cause.infra else ''}): excluded from every arm alike"
            )
            verdict = InfraVerdict(is_infra=True, rule=PAIRED_EXCLUSION, detail=detail)
            quarantined.append(_record(source, experiment, run, fractional, verdict))
        else:
            scored.append(_record(source, experiment, run, fractional, InfraVerdict()))
    return scored, quarantined, tasks


# -- the folder -------------------------------------------------------------------------------------


def _is_import(folder: Path) -> ImportedExperiment | None:
    try:
        return ImportedExperiment.model_validate_json((folder / DESIGN_FILE).read_bytes())
    except (OSError, ValueError):
        return None


def _same_files(a: Path, b: Path) -> bool:
    for name in WRITTEN_FILES:
        pa, pb = a / name, b / name
        if pa.is_file() != pb.is_file():
            return False
        if pa.is_file() and pa.read_bytes() != pb.read_bytes():
            return False
    return True


def _stage(staging: Path, design: ImportedExperiment, scored: list[dict], quarantined: list[dict]) -> None:
    """The folder written whole into `staging`, a fresh sibling of where it goes."""
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    store = ResultsStore(staging)
    # One write and one fsync for every scored record: the folder is new, so "replacing" runs.jsonl
    # creates it. Infrastructure records are appended one by one, as `rig run` appends them.
    store.rewrite_runs(scored)
    for record in quarantined:
        store.append_quarantine(record)
    (staging / DESIGN_FILE).write_text(design.model_dump_json(indent=2) + "\n", encoding="utf-8")


def _place(staging: Path, out: Path, replace: bool, design: ImportedExperiment) -> bool:
    """Move the staged folder to `out`; False when `out` holds these very files already (then untouched).

    A folder holding another import is replaced only with `replace`; a folder that is not an import
    (a `rig run`'s results, anything else) never is.
    """
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise IngestError(f"{out} exists and is not a folder; choose a new --out")
    if out.is_dir() and any(out.iterdir()):
        existing = _is_import(out)
        if existing is None:
            raise IngestError(f"{out} exists and is not a folder `rig import` wrote; choose a new --out")
        if _same_files(staging, out):
            return False
        theirs, ours = existing.experiment.source, design.experiment.source
        if (theirs.kind, theirs.inputs) != (ours.kind, ours.inputs) and not replace:
            raise IngestError(
                f"{out} holds another import ({theirs.kind} of {', '.join(theirs.inputs)}); "
                "pass --replace to overwrite it, or choose a new --out"
            )
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        out.rename(old)
    staging.rename(out)
    if old.exists():
        shutil.rmtree(old)
    return True


def write_import(
    source: Source,
    out: Path,
    *,
    name: str | None = None,
    reference: str | None = None,
    estimand: Estimand = "population",
    replace: bool = False,
) -> Written:
    """Write `source`'s runs as the results folder `out` (its experiment named `name`, default the
    folder's name), the reference arm first among the conditions (default: the first input's).

    Raises IngestError (nothing written) for a reference that is no condition, two sources of one
    run, no scored run at all, or an `out` it must not replace; StoreError when the disk refuses.
    """
    from rig import __version__

    conditions = list(source.conditions)
    if not source.runs:
        raise IngestError(f"no run in {', '.join(source.inputs.values())}; give inputs that hold runs")
    reference = reference if reference is not None else conditions[0]
    if reference not in conditions:
        raise IngestError(f"--reference {reference!r} is not a condition; use one of {', '.join(conditions)}")
    conditions = [reference, *(c for c in conditions if c != reference)]
    experiment = name or out.resolve().name
    scored, quarantined, tasks = records(source, experiment, conditions)
    if not scored:
        raise IngestError(
            f"every one of the {len(quarantined)} runs read is infrastructure (errored, cancelled, limit-hit "
            "or without an outcome): nothing to compare; check the inputs"
        )
    design = ImportedExperiment(
        experiment=ImportedDesign(
            name=experiment,
            conditions=[ImportedCondition(name=c) for c in conditions],
            reference=reference,
            estimand=estimand,
            tasks=tasks,
            source=ImportSource(
                kind=source.kind,
                inputs=source.inputs,
                tool_version=source.tool_version,
                imported_by=__version__,
            ),
        )
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.import-{os.getpid()}"
    try:
        _stage(staging, design, scored, quarantined)
        changed = _place(staging, out, replace, design)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    infra = Counter(str(r["infra"]["rule"]) for r in quarantined if r["infra"]["rule"] != PAIRED_EXCLUSION)
    return Written(
        folder=out,
        scored=len(scored),
        infrastructure=infra,
        excluded=sum(r["infra"]["rule"] == PAIRED_EXCLUSION for r in quarantined),
        conditions=conditions,
        tasks=len(tasks),
        unchanged=not changed,
    )


def first_line(text: object) -> str:
    """The first line of a message from a source, for a record's detail."""
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""


def sum_known(values: Iterable[Number | None]) -> Number | None:
    """The sum of the figures a source reports; None when it reports none of them."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None

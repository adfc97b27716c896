"""`rig import inspect`: Inspect AI eval logs (.eval and .json) as runs, one condition per log.

Each sample x epoch is a run: the sample's id its task, the epoch its repetition, the scorer's value
(`--scorer`, default the first) its outcome: C 1, I 0, P 0.5, N 0, a number in [0, 1] as it is. Its
model usage (summed over models, and per model) is its tokens and cost; its messages give the model
responses, tool calls and tool errors. A sample that errored, hit a limit (an operator's cancel of a
sample is one) or has no score is infrastructure.

With inspect_ai installed, logs are read with its own reader (which also migrates older log
formats); without it, the documented formats are read directly: a .json log is one JSON document
(the EvalLog, samples included), a .eval log a zip holding header.json (or, for a log still being
written, _journal/start.json) and one samples/<id>_epoch_<n>.json per sample, each a JSON document,
Zstandard-compressed by recent Inspect versions.
"""

import io
import json
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rig.ingest.common import (
    IngestError,
    Input,
    Run,
    Source,
    first_line,
    integer,
    number,
    seconds_between,
    sum_known,
    timestamp,
)
from rig.schema import ForeignMetrics, ForeignPins, ModelUsage

# An Inspect grade as an outcome, as inspect_ai's value_to_float reads one: CORRECT, INCORRECT,
# PARTIAL, NOANSWER, and the words it takes for true and false.
GRADES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0, "yes": 1.0, "true": 1.0, "no": 0.0, "false": 0.0}
# What is read of each sample; the rest (events, attachments, store) can be most of a log.
SAMPLE_KEYS = frozenset(
    {
        "id",
        "epoch",
        "scores",
        "error",
        "limit",
        "model_usage",
        "total_time",
        "started_at",
        "completed_at",
        "messages",
    }
)
HEADER = "header.json"
START = "_journal/start.json"
SAMPLES = "samples/"
# The zip compression method number of Zstandard (APPNOTE 4.4.5), which zipfile reads only from 3.14.
ZSTANDARD = 93
_LOCAL_HEADER = struct.Struct("<4s22xHH")

Log = tuple[dict[str, Any], Iterator[dict[str, Any]]]


def _not_a_log(path: Path, why: str) -> IngestError:
    return IngestError(f"{path} is not an Inspect eval log ({why}); give a .eval or .json log Inspect wrote")


def _with_inspect(path: Path) -> Log:
    """The header and samples as inspect_ai's reader reads them, dumped to the documented JSON."""
    from inspect_ai.log import read_eval_log, read_eval_log_samples

    try:
        header = read_eval_log(str(path), header_only=True).model_dump(mode="json")
    # Inspect's reader raises whatever its parser met (zip, JSON, validation errors): all mean the
    # same here, a file it cannot read as a log.
    except Exception as exc:  # noqa: BLE001
        raise _not_a_log(path, first_line(exc) or type(exc).__name__) from None

    def samples() -> Iterator[dict[str, Any]]:
        for sample in read_eval_log_samples(str(path), all_samples_required=False):
            yield sample.model_dump(mode="json", include=set(SAMPLE_KEYS))

    return header, samples()


def _member(archive: zipfile.ZipFile, path: Path, name: str) -> Any:
    """One JSON member of a .eval zip, Zstandard or deflate."""
    info = archive.getinfo(name)
    if info.compress_type == ZSTANDARD:
        import zstandard

        with path.open("rb") as f:
            f.seek(info.header_offset)
            _, name_length, extra_length = _LOCAL_HEADER.unpack(f.read(_LOCAL_HEADER.size))
            f.seek(info.header_offset + _LOCAL_HEADER.size + name_length + extra_length)
            compressed = f.read(info.compress_size)
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(compressed), read_across_frames=True)
        data = reader.read()
    else:
        data = archive.read(name)
    return json.loads(data)


def _documented(path: Path) -> Log:
    """The header and samples of a log read as its format is documented, without inspect_ai."""
    try:
        if path.suffix == ".json":
            document = json.loads(path.read_bytes())
            if not isinstance(document, dict) or not isinstance(document.get("eval"), dict):
                raise _not_a_log(path, "no `eval` object")
            return document, iter(document.get("samples") or [])
        archive = zipfile.ZipFile(path)
        names = archive.namelist()
        if HEADER not in names and START not in names:
            raise _not_a_log(path, f"no {HEADER}")
        header = _member(archive, path, HEADER if HEADER in names else START)
        members = [n for n in names if n.startswith(SAMPLES) and n.endswith(".json")]
        return header, (_member(archive, path, n) for n in members)
    except (OSError, ValueError, zipfile.BadZipFile, KeyError, struct.error) as exc:
        raise _not_a_log(path, first_line(exc) or type(exc).__name__) from None


def _read(path: Path, use_inspect: bool | None) -> Log:
    if path.suffix not in (".eval", ".json"):
        raise _not_a_log(path, "not .eval or .json")
    if use_inspect is None:
        try:
            import inspect_ai.log  # noqa: F401

            use_inspect = True
        except ImportError:
            use_inspect = False
    return _with_inspect(path) if use_inspect else _documented(path)


def outcome(value: Any) -> float | None:
    """A scorer's value as an outcome in [0, 1]: a grade (C, I, P, N; yes/no, true/false), a boolean
    or a number in [0, 1] (a numeric string too); None for anything else."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        grade = GRADES.get(value, GRADES.get(value.lower()))
        if grade is not None:
            return grade
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int | float) and 0 <= value <= 1:
        return float(value)
    return None


def _metrics(sample: dict[str, Any], model: str | None) -> ForeignMetrics:
    usage = {str(m): u for m, u in (sample.get("model_usage") or {}).items() if isinstance(u, dict)}
    messages = [m for m in sample.get("messages") or [] if isinstance(m, dict)]
    counts: dict[str, Any] = {}
    if messages:
        assistant = [m for m in messages if m.get("role") == "assistant"]
        counts = {
            "assistant_messages": len(assistant),
            "tool_calls": sum(len(m.get("tool_calls") or []) for m in assistant),
            "tool_errors": sum(1 for m in messages if m.get("role") == "tool" and m.get("error")),
        }
    if not usage:
        return ForeignMetrics(model=model, **counts)
    costs = [number(u.get("total_cost")) for u in usage.values()]
    cost = sum(c for c in costs if c is not None) if all(c is not None for c in costs) else None
    return ForeignMetrics(
        model=model,
        input_tokens=sum_known(integer(u.get("input_tokens")) for u in usage.values()),
        output_tokens=sum_known(integer(u.get("output_tokens")) for u in usage.values()),
        cache_read_tokens=sum_known(integer(u.get("input_tokens_cache_read")) for u in usage.values()),
        cache_write_tokens=sum_known(integer(u.get("input_tokens_cache_write")) for u in usage.values()),
        reasoning_tokens=sum_known(integer(u.get("reasoning_tokens")) for u in usage.values()),
        total_tokens=sum_known(integer(u.get("total_tokens")) for u in usage.values()),
        cost_usd=cost,
        cost_source="inspect_ai" if cost is not None else None,
        per_model={
            name: ModelUsage(
                input_tokens=integer(u.get("input_tokens")) or 0,
                output_tokens=integer(u.get("output_tokens")) or 0,
                cache_read_tokens=integer(u.get("input_tokens_cache_read")) or 0,
                cache_write_tokens=integer(u.get("input_tokens_cache_write")) or 0,
                reasoning_tokens=integer(u.get("reasoning_tokens")) or 0,
                total_tokens=integer(u.get("total_tokens")) or 0,
                cost_usd=number(u.get("total_cost")),
            )
            for name, u in usage.items()
        },
        **counts,
    )


def _infra(sample: dict[str, Any], scorer: str) -> tuple[str, str] | None:
    """Why a sample is infrastructure (rule, detail), None when it is not."""
    error = sample.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        return "inspect_error", first_line(message) or "errored"
    limit = sample.get("limit")
    if limit:
        if isinstance(limit, dict):
            # Readers differ in the value's type (4 or 4.0): shown the same.
            value = number(limit.get("limit"))
            shown = f"{value:g}" if value is not None else limit.get("limit")
            return "inspect_limit", f"{limit.get('type')} limit {shown} hit"
        return "inspect_limit", f"{limit} limit hit"
    if scorer not in (sample.get("scores") or {}):
        return "unscored", f"no score from scorer {scorer!r}"
    return None


def _scorer(header: dict[str, Any], samples: list[dict[str, Any]], chosen: str | None, path: Path) -> str:
    """The scorer whose value is the outcome: `chosen`, else the log's first (its results' first
    scorer where the samples have it, else the first the samples name)."""
    names = [
        n for n in dict.fromkeys(k for s in samples for k in (s.get("scores") or {})) if isinstance(n, str)
    ]
    if chosen is not None:
        if chosen not in names:
            listed = ", ".join(names) or "none"
            raise IngestError(f"{path}: no scorer {chosen!r}; use --scorer with one of {listed}")
        return chosen
    if not names:
        raise IngestError(f"{path}: no sample has a score; score the log (inspect score) first")
    results = [
        s.get("name") for s in ((header.get("results") or {}).get("scores") or []) if isinstance(s, dict)
    ]
    return next((n for n in results if n in names), names[0])


def _runs(
    item: Input, header: dict[str, Any], samples: list[dict[str, Any]], chosen: str | None
) -> list[Run]:
    spec = header.get("eval") or {}
    packages = spec.get("packages") or {}
    version = packages.get("inspect_ai")
    steps = (header.get("plan") or {}).get("steps") or []
    solver = (
        spec.get("solver") or "+".join(str(s.get("solver")) for s in steps if isinstance(s, dict)) or None
    )
    model = spec.get("model")
    revision = spec.get("revision") or {}
    pins = ForeignPins(
        harness_version=version,
        source_revision=revision.get("commit") if isinstance(revision, dict) else None,
        task_version=str(spec["task_version"]) if spec.get("task_version") is not None else None,
    )
    scorer = _scorer(header, samples, chosen, item.path)
    declared = [str(i) for i in ((spec.get("dataset") or {}).get("sample_ids") or [])]
    rank = {sample_id: i for i, sample_id in enumerate(declared)}
    runs = []
    for sample in samples:
        task, epoch = str(sample.get("id")), integer(sample.get("epoch")) or 1
        infra = _infra(sample, scorer)
        value = None
        if infra is None:
            raw = (
                sample["scores"][scorer].get("value") if isinstance(sample["scores"][scorer], dict) else None
            )
            value = outcome(raw)
            if value is None:
                raise IngestError(
                    f"{item.path}: sample {task} epoch {epoch}: scorer {scorer!r} gives {raw!r}, not a grade "
                    "(C, I, P, N) or a number in [0, 1]; choose another scorer with --scorer"
                )
        started, finished = timestamp(sample.get("started_at")), timestamp(sample.get("completed_at"))
        wall = number(sample.get("total_time"))
        runs.append(
            Run(
                condition=item.name,
                task=task,
                file=item.shown,
                item=f"sample {task} epoch {epoch}",
                outcome=value,
                infra=infra,
                repetition=epoch,
                harness=solver,
                harness_version=version,
                model=model,
                started_at=started,
                finished_at=finished,
                wall_s=wall if wall is not None else seconds_between(started, finished),
                metrics=_metrics(sample, model),
                pins=pins,
                tool_version=f"inspect_ai {version}" if version else None,
                order=(rank.get(task, len(rank)), task, epoch),
            )
        )
    # The log's own sample order, whichever order the reader met them in.
    return sorted(runs, key=lambda r: r.order)


def read_logs(inputs: list[Input], scorer: str | None = None, use_inspect: bool | None = None) -> Source:
    """The runs of one Inspect eval log per condition; `use_inspect` None: inspect_ai's reader where
    it is installed. IngestError for a file that is not a log, a scorer no sample has, or a value
    that is no outcome."""
    runs: list[Run] = []
    for item in inputs:
        header, samples = _read(item.path, use_inspect)
        runs += _runs(item, header, list(samples), scorer)
    return Source(
        kind="inspect",
        runs=runs,
        conditions=[i.name for i in inputs],
        inputs={i.name: i.shown for i in inputs},
    )

"""ATIF export: each stored attempt as one trajectory of the Agent Trajectory Interchange Format
(v1.8, the format Harbor's viewer and tools read), with the rig's verdict and pins in its `extra`.

A trajectory is built from the attempt's saved session alone (its harness's adapter reads it as a
Transcript, `rig.store.transcripts`) and its record. Scored and quarantined attempts are both exported,
marked as which in `extra.rig.status`. Every trajectory is redacted like the records, validated
with the `atif` models and read back before anything is written; files appear in the output folder
only once all of them were made.
"""

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import atif

from rig.schema import RunRecord, Transcript, TranscriptStep
from rig.store.migrate import read_quarantine, read_runs
from rig.store.redact import Redactor
from rig.store.results import ResultsStore
from rig.store.transcripts import attempt_transcript

SCHEMA_VERSION = "ATIF-v1.8"
FORMATS = ("atif",)
Status = Literal["scored", "quarantined"]


class ExportError(Exception):
    """An attempt that cannot be exported as valid ATIF (nothing was written)."""


@dataclass(frozen=True)
class Exported:
    """What one export wrote."""

    folder: Path
    scored: int
    quarantined: int
    gaps: int

    @property
    def total(self) -> int:
        """Trajectories written."""
        return self.scored + self.quarantined


def trajectory(record: RunRecord, transcript: Transcript, status: Status) -> atif.Trajectory:
    """The ATIF trajectory of one attempt: its transcript's steps, the record's totals as final
    metrics, and the rig's verdict and pins in `extra.rig`."""
    steps = [_step(index, step) for index, step in enumerate(transcript.steps, start=1)]
    metrics = record.metrics
    return atif.Trajectory(
        schema_version=SCHEMA_VERSION,
        session_id=transcript.session_id or record.run_id,
        trajectory_id=f"{record.run_id}/attempt-{record.attempt}",
        agent=atif.Agent(
            name=record.harness,
            version=record.harness_version,
            model_name=record.model or metrics.model or transcript.model,
            extra={
                "thinking": record.thinking or metrics.thinking_level,
                "condition_mapping": record.condition_mapping,
            },
        ),
        steps=steps,
        notes="; ".join(f"not in the steps: {gap}" for gap in transcript.gaps) or None,
        final_metrics=atif.FinalMetrics(
            total_prompt_tokens=metrics.input_tokens + metrics.cache_read_tokens + metrics.cache_write_tokens,
            total_completion_tokens=metrics.output_tokens,
            total_cached_tokens=metrics.cache_read_tokens,
            total_cost_usd=metrics.cost_usd,
            total_steps=len(steps),
            extra={
                "cache_write_tokens": metrics.cache_write_tokens,
                "reasoning_tokens": metrics.reasoning_tokens,
                "total_tokens": metrics.total_tokens,
                "cost_source": metrics.cost_source,
                "assistant_messages": metrics.assistant_messages,
                "tool_calls": metrics.tool_calls,
                "tool_errors": metrics.tool_errors,
                "transport_failures": metrics.transport_failures,
            },
        ),
        extra={"rig": _verdict(record, status, transcript)},
    )


def _verdict(record: RunRecord, status: Status, transcript: Transcript) -> dict[str, Any]:
    """What the rig decided about the attempt, and what it ran with."""
    dump = record.model_dump(mode="json")
    return {
        "status": status,
        "experiment": record.experiment,
        "run_id": record.run_id,
        "attempt": record.attempt,
        "task": record.task,
        "hypothesis": record.hypothesis,
        "condition": record.condition,
        "repetition": record.repetition,
        "success": record.success,
        "failing_stage": record.failing_stage,
        "hang": record.hang,
        "gate": dump["check"],
        "hidden": dump["hidden"],
        "infra": dump["infra"],
        "audit": dump["audit"],
        "protected": dump["protected"],
        "rig_error": record.rig_error,
        "started_at": dump["started_at"],
        "finished_at": dump["finished_at"],
        "wall_s": record.wall_s,
        "exit_code": record.exit_code,
        "timed_out": record.timed_out,
        "stalled": record.stalled,
        "pins": dump["pins"],
        "artifacts": record.artifacts,
        "transcript_gaps": transcript.gaps,
    }


def _step(index: int, step: TranscriptStep) -> atif.Step:
    if step.source != "agent":
        return atif.Step(step_id=index, source=step.source, message=step.text, timestamp=step.timestamp)
    calls, results = [], []
    for number, call in enumerate(step.tool_calls, start=1):
        call_id = call.id or f"step-{index}-call-{number}"
        # ATIF arguments are an object: a free-form input (Codex's apply_patch) is kept under `input`.
        arguments = call.arguments if isinstance(call.arguments, dict) else {"input": call.arguments}
        calls.append(atif.ToolCall(tool_call_id=call_id, function_name=call.name, arguments=arguments))
        if call.output is not None:
            results.append(
                atif.ObservationResult(
                    source_call_id=call_id, content=call.output, extra={"is_error": call.is_error}
                )
            )
    return atif.Step(
        step_id=index,
        source="agent",
        message=step.text,
        timestamp=step.timestamp,
        model_name=step.model,
        reasoning_content=step.reasoning,
        tool_calls=calls or None,
        observation=atif.Observation(results=results) if results else None,
        metrics=_step_metrics(step),
    )


def _step_metrics(step: TranscriptStep) -> atif.Metrics | None:
    """A turn's tokens in ATIF's terms (prompt tokens include the cached ones); None if none recorded."""
    counts = (step.input_tokens, step.cache_read_tokens, step.cache_write_tokens, step.output_tokens)
    if all(c is None for c in counts) and step.cost_usd is None:
        return None
    return atif.Metrics(
        prompt_tokens=sum(c or 0 for c in counts[:3]),
        completion_tokens=step.output_tokens,
        cached_tokens=step.cache_read_tokens,
        cost_usd=step.cost_usd,
        extra={
            "input_tokens": step.input_tokens,
            "cache_write_tokens": step.cache_write_tokens,
            "reasoning_tokens": step.reasoning_tokens,
        },
    )


def validated_json(document: dict[str, Any]) -> str:
    """`document` as ATIF JSON, once it validates and reads back unchanged; ValueError otherwise."""
    parsed = atif.Trajectory.model_validate(document)
    text = parsed.model_dump_json(indent=2, exclude_none=True)
    if atif.Trajectory.model_validate_json(text) != parsed:
        raise ValueError("the trajectory does not read back as written")
    return text + "\n"


def file_name(record: RunRecord) -> str:
    """The trajectory's file name: run id and attempt."""
    return f"{record.run_id}__attempt-{record.attempt}.json"


def _attempt_folder(root: Path, artifacts: str) -> Path | None:
    """The attempt folder a record names, if it is a relative path inside the results folder."""
    relative = PurePosixPath(artifacts)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        return None
    return root / relative


def export_atif(
    folder: Path,
    out: Path,
    redactor: Redactor,
    progress: Callable[[int, int], None] | None = None,
) -> Exported:
    """Write one ATIF trajectory per stored attempt (scored and quarantined) of the results folder
    `folder` into `out`. Raises ExportError (with nothing written) for an attempt whose trajectory
    does not validate; StoreError for unreadable records. `progress(done, total)` follows along."""
    if out.is_symlink():
        # The default folder lies inside the results folder, which may come from elsewhere.
        raise ExportError(f"{out} is a symlink; remove it or pass another --out")
    store = ResultsStore(folder)
    attempts: list[tuple[dict[str, Any], Status]] = [(r, "scored") for r in read_runs(store)]
    attempts += [(r, "quarantined") for r in read_quarantine(store)]
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".atif-", dir=out))
    counts = {"scored": 0, "quarantined": 0}
    gaps = 0
    try:
        for done, (data, status) in enumerate(attempts, start=1):
            where = f"{status} record {data.get('run_id')!r} attempt {data.get('attempt')}"
            try:
                record = RunRecord.model_validate(data)
            except ValueError as exc:
                raise ExportError(
                    f"{where}: not a run record this rig reads ({exc.errors()[0]['msg']})"
                ) from exc
            attempt = _attempt_folder(folder, record.artifacts)
            if attempt is None:
                transcript = Transcript(
                    harness=record.harness, gaps=[f"artifacts {record.artifacts!r} lie outside"]
                )
            else:
                transcript = attempt_transcript(data, attempt)
            gaps += bool(transcript.gaps)
            document = redactor.value(trajectory(record, transcript, status).model_dump(mode="json"))
            try:
                text = validated_json(document)
            except ValueError as exc:
                raise ExportError(f"{where}: not valid ATIF ({str(exc).splitlines()[0]})") from exc
            (staging / file_name(record)).write_text(text, encoding="utf-8")
            counts[status] += 1
            if progress is not None:
                progress(done, len(attempts))
        for written in sorted(staging.iterdir()):
            os.replace(written, out / written.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Exported(out, counts["scored"], counts["quarantined"], gaps)

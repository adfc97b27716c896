"""The OpenCode session parser: a run's metrics, transcript, failure signature and pending tool part
from the exported session (`session.json`, the shape of `opencode export`), OpenCode's log
(`opencode.log`, one `stream error` line per failed request) and the `--format json` event stream
(`stdout.log`) alone, so stored sessions can be parsed again later.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnesses.cli_harness import round_cost
from harnesses.logs import (
    ToolLog,
    as_int,
    as_str,
    as_time,
    derive_behaviour,
    iso_timestamp,
    optional_int,
    place_by_time,
    read_jsonl,
    record_compactions,
    unread_usage,
    unreadable_lines,
    usage_gaps,
)
from rig.schema import Metrics, ModelUsage, Transcript, TranscriptStep, TranscriptToolCall

# OpenCode up to 1.2 counts the reasoning tokens inside `output` and prices them once more apart.
DOUBLE_PRICED_GAP = "cost reported by an OpenCode that prices the reasoning tokens twice (up to 1.2)"
# Its OpenAI-compatible provider counts cache writes inside `cached_tokens`, read as cache reads.
NO_CACHE_WRITE_GAP = "cache writes not recorded by OpenCode (they are inside the cache reads)"
LOG_FILE = "opencode.log"
INFRA_SIGNATURE = "opencode_provider_error"
TRUNCATED_SIGNATURE = "opencode_truncated_stream"
COST_SOURCE = "harness"
# The part type whose tokens and cost the parser reads: usage in any other part is a gap.
READ_PARTS = frozenset({"step-finish"})
# The `--format json` event types: a stream with none of them is of a format the parser does not know.
STREAM_EVENTS = frozenset({"step_start", "step_finish", "tool_use", "text", "reasoning", "error"})
# A log line of a failed provider request (each attempt, retried or not).
_STREAM_ERROR = 'message="stream error"'
_LOG_SLACK_MS = 1000
# OpenCode 1.18.33 retries a retryable failed request this many times, with no setting to change it.
RETRIES = 5
# The errors OpenCode records for a failed provider request (the AI SDK's, as OpenCode names them).
PROVIDER_ERRORS = frozenset({"APIError", "ProviderAuthError", "UnknownError"})


def _export(path: Path | None) -> dict[str, Any]:
    if path is None or not path.is_file():
        return {}
    try:
        export = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}
    return export if isinstance(export, dict) else {}


def _messages(export: dict[str, Any]) -> list[dict[str, Any]]:
    messages = export.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def _parts(export: dict[str, Any], stream: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every part in order: the exported session's, else the event stream's."""
    if export:
        parts = [p for m in _messages(export) for p in (m.get("parts") or [])]
    else:
        parts = [e.get("part") for e in stream]
    return [p for p in parts if isinstance(p, dict)]


def _fold_tool(metrics: Metrics, part: dict[str, Any], tools: ToolLog) -> None:
    """One part into the tool log: a step start begins a model response, a tool part is a call
    (with its result once its state is completed or error)."""
    if part.get("type") == "step-start":
        tools.response()
        return
    if part.get("type") != "tool":
        return
    name = str(part.get("tool"))
    call_id = part.get("callID") if isinstance(part.get("callID"), str) else None
    state = part.get("state") if isinstance(part.get("state"), dict) else {}
    arguments = state.get("input") if isinstance(state.get("input"), dict) else {}
    metrics.tool_calls += 1
    metrics.tool_calls_by_name[name] = metrics.tool_calls_by_name.get(name, 0) + 1
    if name == "bash" and isinstance(arguments.get("command"), str):
        metrics.bash_commands.append(arguments["command"])
        workdir = arguments.get("workdir") if isinstance(arguments.get("workdir"), str) else None
        tools.shell(call_id, arguments["command"], workdir)
    elif name == "read" and isinstance(arguments.get("filePath"), str):
        tools.read(call_id, arguments["filePath"])
    else:
        tools.call(call_id)
    status = state.get("status")
    if status in ("completed", "error"):
        failed = status == "error"
        metrics.tool_errors += failed
        text = state.get("error") if failed else state.get("output")
        tools.result(call_id, str(text or ""), failed)


def parse_files(session_path: Path | None, stdout_path: Path | None) -> Metrics:
    """Metrics of one OpenCode run from its exported session, log and `--format json` event stream.

    Each `step-finish` part is one model response, with its tokens and cost: OpenCode's `output`
    leaves out the reasoning tokens it counts apart, so the rig's output is their sum (as OpenAI
    counts it). Tool parts give the calls, their errors and what was read; errors come from the
    assistant messages (or the stream's `error` events), failed attempts from the log.
    """
    export, stream = _export(session_path), read_jsonl(stdout_path)
    metrics = Metrics()
    info = export.get("info") if isinstance(export.get("info"), dict) else {}
    cwd = info.get("directory") if isinstance(info.get("directory"), str) else None
    costs: list[float] = []
    tools = ToolLog()
    last_text: str | None = None
    summaries = _summary_ids(export)
    for part in _parts(export, stream):
        _fold_tool(metrics, part, tools)
        if part.get("type") == "text" and not part.get("synthetic"):
            last_text = str(part.get("text", ""))
        elif part.get("type") == "step-start":
            last_text = None
        elif part.get("type") == "step-finish":
            # A summary's usage and cost are the run's (OpenCode counts them in its own totals),
            # but it is no response of the agent's and its text no answer.
            _add_tokens(metrics, part.get("tokens"))
            if isinstance(part.get("cost"), int | float):
                costs.append(float(part["cost"]))
            if part.get("messageID") in summaries:
                continue
            metrics.assistant_messages += 1
            metrics.stop_reasons.append(str(part.get("reason")))
            if part.get("reason") == "stop":
                metrics.final_text = last_text
    if export:
        _fold_compactions(metrics, _messages(export))
    _fold_messages(metrics, _messages(export), stream)
    metrics.transport_failures = _failed_attempts(session_path, stdout_path, metrics, _error_end(export))
    cut = sum(truncated(p) for p in _parts(export, stream))
    metrics.transport_failures += cut
    if costs:
        metrics.cost_usd = round_cost(sum(costs))
        metrics.cost_source = COST_SOURCE
    usage_gaps(metrics, cut, unread_usage(_parts(export, stream), READ_PARTS))
    if metrics.cache_read_tokens and not metrics.cache_write_tokens:
        metrics.unrecorded(NO_CACHE_WRITE_GAP)
    if session_path is not None and session_path.is_file() and not isinstance(export.get("messages"), list):
        metrics.incomplete("session export of a format this parser does not know (no messages)")
    if stream and not any(e.get("type") in STREAM_EVENTS for e in stream):
        metrics.incomplete("event stream of a format this parser does not know (no event of a type it reads)")
    derive_behaviour(metrics, tools.read_paths(), cwd, attempted=tools.read_attempts())
    return metrics


def read_transcript(session_path: Path | None, stdout_path: Path | None) -> Transcript:
    """The steps of one OpenCode run.

    From the exported session: each user message's text as a user step (the first is the prompt),
    and for each assistant message one agent step per model response (`step-start` to
    `step-finish`, whose tokens and cost it takes, in the rig's terms as parse_files counts them),
    with its text, reasoning and tool parts; a message's error is a system step after it. Each
    failed request of OpenCode's log (`stream error`) is a system step, placed by time. Without a
    session, the event stream's parts stand in.
    """
    export, stream = _export(session_path), read_jsonl(stdout_path)
    info = export.get("info") if isinstance(export.get("info"), dict) else {}
    session_id = as_str(info.get("id")) or next((as_str(e.get("sessionID")) for e in stream), None)
    transcript = Transcript(
        harness="opencode",
        session_id=session_id,
        gaps=unreadable_lines(stdout_path),
    )
    if session_path is not None and session_path.is_file() and not export:
        transcript.gaps.append(f"{session_path.name} is not a JSON object; read the event stream instead")
    steps: list[TranscriptStep] = []
    if export:
        for message in _messages(export):
            steps += _message_steps(message)
    else:
        parts = [(e.get("part"), e.get("timestamp")) for e in stream if isinstance(e.get("part"), dict)]
        steps += _part_steps(parts, None)
        for event in stream:
            if event.get("type") == "error" and isinstance(event.get("error"), dict):
                text = f"[error] {_error_text(event['error'])}"
                steps.append(
                    TranscriptStep(
                        source="system", text=text, timestamp=iso_timestamp(event.get("timestamp"))
                    )
                )
    transcript.steps = place_by_time(steps, _log_failures(session_path, stdout_path))
    transcript.model = next((s.model for s in steps if s.model), None)
    if not export and not stream:
        transcript.gaps.append("neither the session nor the event stream was saved")
    return transcript


def _message_steps(message: dict[str, Any]) -> list[TranscriptStep]:
    info = message.get("info") if isinstance(message.get("info"), dict) else {}
    parts = [p for p in message.get("parts") or [] if isinstance(p, dict)]
    time = info.get("time") if isinstance(info.get("time"), dict) else {}
    created = iso_timestamp(time.get("created"))
    if info.get("role") == "user":
        texts = [str(p.get("text", "")) for p in parts if p.get("type") == "text" and not p.get("synthetic")]
        return [TranscriptStep(source="user", text="\n".join(texts), timestamp=created)]
    if info.get("role") != "assistant":
        return []
    model = (
        f"{info['providerID']}/{info['modelID']}" if info.get("providerID") and info.get("modelID") else None
    )
    steps = _part_steps([(p, time.get("created")) for p in parts], model)
    error = info.get("error") if isinstance(info.get("error"), dict) else None
    if error:
        ended = iso_timestamp(time.get("completed")) or created
        steps.append(TranscriptStep(source="system", text=f"[error] {_error_text(error)}", timestamp=ended))
    return steps


def _part_steps(parts: list[tuple[Any, Any]], model: str | None) -> list[TranscriptStep]:
    """Agent steps from parts in order, each `(part, when it or its message began)`."""
    steps: list[TranscriptStep] = []
    for part, began in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "step-start" or (not steps and kind in ("text", "reasoning", "tool", "step-finish")):
            steps.append(TranscriptStep(source="agent", model=model, timestamp=iso_timestamp(began)))
        if not steps or kind == "step-start":
            continue
        step = steps[-1]
        if kind == "text" and not part.get("synthetic"):
            step.text = "\n".join(t for t in (step.text, str(part.get("text", ""))) if t)
        elif kind == "reasoning":
            step.reasoning = "\n".join(t for t in (step.reasoning, str(part.get("text", ""))) if t)
        elif kind == "tool":
            state = part.get("state") if isinstance(part.get("state"), dict) else {}
            status = state.get("status")
            done = status in ("completed", "error")
            step.tool_calls.append(
                TranscriptToolCall(
                    id=as_str(part.get("callID")),
                    name=str(part.get("tool")),
                    arguments=state.get("input") if isinstance(state.get("input"), dict) else {},
                    output=str(state.get("error" if status == "error" else "output") or "") if done else None,
                    is_error=status == "error" if done else None,
                )
            )
        elif kind == "step-finish":
            tokens = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
            cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
            step.input_tokens = optional_int(tokens.get("input"))
            step.output_tokens = None if tokens.get("output") is None else _output_and_total(tokens)[0]
            step.reasoning_tokens = optional_int(tokens.get("reasoning"))
            step.cache_read_tokens = optional_int(cache.get("read"))
            step.cache_write_tokens = optional_int(cache.get("write"))
            cost = part.get("cost")
            step.cost_usd = (
                float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
            )
    return steps


def _log_failures(session_path: Path | None, stdout_path: Path | None) -> list[TranscriptStep]:
    """Each failed request OpenCode logged next to the session, as a system step."""
    folder = (session_path or stdout_path or Path("/nonexistent")).parent
    log = folder / LOG_FILE
    if not log.is_file():
        return []
    notes = []
    for line in log.read_text(errors="replace").splitlines():
        if _STREAM_ERROR in line:
            error = line.split(" error.error=", 1)[1].strip('"') if " error.error=" in line else ""
            stamp = line.split(" ", 1)[0].removeprefix("timestamp=")
            notes.append(
                TranscriptStep(
                    source="system", text=f"[failed request] {error}", timestamp=iso_timestamp(stamp)
                )
            )
    return notes


def _add_tokens(metrics: Metrics, tokens: Any) -> None:
    """Add one step's OpenCode token counts (`input` excludes the cached tokens)."""
    if not isinstance(tokens, dict):
        return
    _, _, inside = _output_and_total(tokens)
    if inside and as_int(tokens.get("reasoning")):
        metrics.incomplete(DOUBLE_PRICED_GAP)
    metrics.add_tokens(step_usage(tokens))


def step_usage(tokens: dict[str, Any]) -> ModelUsage:
    """The tokens of one step's OpenCode `tokens` object (no cost)."""
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    output, total, _ = _output_and_total(tokens)
    return ModelUsage(
        input_tokens=as_int(tokens.get("input")),
        output_tokens=output,
        reasoning_tokens=as_int(tokens.get("reasoning")),
        cache_read_tokens=as_int(cache.get("read")),
        cache_write_tokens=as_int(cache.get("write")),
        total_tokens=total,
    )


def _output_and_total(tokens: dict[str, Any]) -> tuple[int, int, bool]:
    """One step's output (reasoning included, as OpenAI counts it) and total tokens, and whether
    OpenCode's `output` already held the reasoning.

    It does up to 1.2 (1.0 records no `total`; 1.2's `total` is input, output and cache alone) and
    leaves them out by 1.14 (its `total` adds them).
    """
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    output = as_int(tokens.get("output"))
    without_reasoning = (
        as_int(tokens.get("input")) + output + as_int(cache.get("read")) + as_int(cache.get("write"))
    )
    total = as_int(tokens["total"]) if "total" in tokens else without_reasoning
    if total == without_reasoning:
        return output, total, True
    return output + as_int(tokens.get("reasoning")), total, False


def _summary_ids(export: dict[str, Any]) -> set[str]:
    """The ids of the session's summary messages (OpenCode's compactions)."""
    ids = set()
    for message in _messages(export):
        info = message.get("info") if isinstance(message.get("info"), dict) else {}
        if info.get("role") == "assistant" and info.get("summary") is True:
            ids.add(str(info.get("id")))
    return ids


def _fold_compactions(metrics: Metrics, messages: list[dict[str, Any]]) -> None:
    """The session's compactions, each a user message holding a `compaction` part answered by an
    assistant message marked `summary` (its request's tokens).

    The tokens before one are the total of the last agent response before it: what OpenCode
    compared with the model's limit to decide on it (`isOverflow`). It records no size of the
    context after one. A compaction part without a finished summary (it failed, or the run was
    killed first) counts for nothing, and its usage is unknown.
    """
    compactions: list[tuple[int | None, int | None]] = []
    spent = 0
    requested = 0
    before: int | None = None
    parents: set[str] = set()
    for message in messages:
        info = message.get("info") if isinstance(message.get("info"), dict) else {}
        parts = [p for p in message.get("parts") or [] if isinstance(p, dict)]
        tokens = info.get("tokens") if isinstance(info.get("tokens"), dict) else None
        if info.get("role") == "user" and any(p.get("type") == "compaction" for p in parts):
            requested += 1
            parents.add(str(info.get("id")))
        elif info.get("role") != "assistant":
            continue
        elif info.get("summary") is True:
            if info.get("parentID") in parents and info.get("finish") and not info.get("error"):
                compactions.append((before, None))
                spent += step_usage(tokens).total_tokens if tokens else 0
        elif tokens is not None:
            before = step_usage(tokens).total_tokens
    record_compactions(metrics, compactions, spent)
    if requested > len(compactions):
        metrics.incomplete(
            f"{requested - len(compactions)} compaction(s) started and never finished: their usage is unknown"
        )


def _fold_messages(metrics: Metrics, messages: list[dict[str, Any]], stream: list[dict[str, Any]]) -> None:
    """Model, thinking variant and errors from the assistant messages, else the stream's errors."""
    for message in messages:
        info = message.get("info") if isinstance(message.get("info"), dict) else {}
        if info.get("role") == "user" and isinstance(info.get("model"), dict):
            variant = info["model"].get("variant")
            metrics.thinking_level = variant if isinstance(variant, str) else metrics.thinking_level
        if info.get("role") != "assistant":
            continue
        if info.get("providerID") and info.get("modelID"):
            metrics.model = f"{info['providerID']}/{info['modelID']}"
        error = info.get("error") if isinstance(info.get("error"), dict) else None
        if error:
            metrics.stop_reasons.append("error")
            metrics.error_messages.append(_error_text(error))
    if messages:
        return
    for event in stream:
        if event.get("type") == "error" and isinstance(event.get("error"), dict):
            metrics.stop_reasons.append("error")
            metrics.error_messages.append(_error_text(event["error"]))


@dataclass(frozen=True)
class _ErrorEnd:
    """The session's last assistant message, which ended in an error: when it was created and
    completed (ms since the epoch), and whether OpenCode deemed the error retryable."""

    created: int | None
    completed: int | None
    retryable: bool


def _error_end(export: dict[str, Any]) -> _ErrorEnd | None:
    """How the session's last assistant message ended in an error, if it did."""
    for message in reversed(_messages(export)):
        info = message.get("info") if isinstance(message.get("info"), dict) else {}
        if info.get("role") == "assistant":
            error = info.get("error")
            if not isinstance(error, dict):
                return None
            time = info.get("time") if isinstance(info.get("time"), dict) else {}
            data = error.get("data") if isinstance(error.get("data"), dict) else {}
            return _ErrorEnd(
                as_int(time.get("created")) or None,
                as_int(time.get("completed")) or None,
                data.get("isRetryable") is True,
            )
    return None


def ends_in_provider_error(export: dict[str, Any], stream: list[dict[str, Any]]) -> bool:
    """Whether the session's last assistant message carries a provider error (an abort or a tool's
    error is none); without a session, whether the event stream's last event is such an error."""
    for message in reversed(_messages(export)):
        info = message.get("info") if isinstance(message.get("info"), dict) else {}
        if info.get("role") == "assistant":
            error = info.get("error") if isinstance(info.get("error"), dict) else {}
            return error.get("name") in PROVIDER_ERRORS
    last = stream[-1] if stream else {}
    error = last.get("error") if isinstance(last.get("error"), dict) else {}
    return last.get("type") == "error" and error.get("name") in PROVIDER_ERRORS


def truncated(part: dict[str, Any]) -> bool:
    """A model response that ended without usage: its stream was cut before the finish reason and
    usage chunk. OpenCode takes such a response as complete (reason `unknown`, zero tokens) and
    runs its tool call; a provider reports usage at the end of every complete response."""
    if part.get("type") != "step-finish":
        return False
    tokens = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
    return as_int(tokens.get("input")) + as_int(tokens.get("output")) == 0


def signature(session_path: Path | None, stdout_path: Path | None) -> str | None:
    """`opencode_provider_error` when the run's last model request failed and nothing answered it,
    `opencode_truncated_stream` when a response ended without usage; else None
    (OpenCodeHarness.infra_signature)."""
    export, stream = _export(session_path), read_jsonl(stdout_path)
    if ends_in_provider_error(export, stream):
        return INFRA_SIGNATURE
    if any(truncated(p) for p in _parts(export, stream)):
        return TRUNCATED_SIGNATURE
    return None


def pending_tool_part(session_path: Path | None, stdout_path: Path | None) -> bool:
    """Whether a tool part of the last assistant message was still pending or running
    (OpenCodeHarness.tool_pending)."""
    tools = ToolLog()
    for part in _parts(_export(session_path), read_jsonl(stdout_path)):
        _fold_tool(Metrics(), part, tools)
    return tools.pending


def _error_text(error: dict[str, Any]) -> str:
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    return str(data.get("message") or error.get("name") or "unknown error")


def _failed_attempts(
    session_path: Path | None, stdout_path: Path | None, metrics: Metrics, ended: _ErrorEnd | None
) -> int:
    """Failed provider requests: OpenCode logs each failed attempt (retried or not) as a `stream
    error` line next to the session, but a process that exits right after its last attempts loses
    their lines (the log is buffered). A session ending on a retryable error gave that request up
    only after its last retry: its attempts are 1 + RETRIES however many lines were lost (with a
    `retry-after-ms` of 0 they are milliseconds apart, and most are). A session ending on another
    error more than a second after the last logged failure adds one. Without the log, the errors
    the session recorded."""
    folder = (session_path or stdout_path or Path("/nonexistent")).parent
    log = folder / LOG_FILE
    if not log.is_file():
        return len(metrics.error_messages)
    failures = [line for line in log.read_text(errors="replace").splitlines() if _STREAM_ERROR in line]
    if ended is not None and ended.retryable and ended.created is not None:
        created = ended.created
        earlier = [line for line in failures if (_log_time(line) or created) < created]
        return len(earlier) + max(len(failures) - len(earlier), 1 + RETRIES)
    last = _log_time(failures[-1]) if failures else None
    # A logged last failure precedes the message's end by milliseconds; retries are 2 s apart.
    end = ended.completed if ended is not None else None
    unlogged = end is not None and (last is None or end - last > _LOG_SLACK_MS)
    return len(failures) + unlogged


def _log_time(line: str) -> int | None:
    """The time of an OpenCode log line (`timestamp=2026-01-01T00:00:00.000Z ...`), ms since the epoch."""
    stamp = as_time(line.split(" ", 1)[0].removeprefix("timestamp="))
    return None if stamp is None else int(stamp.timestamp() * 1000)

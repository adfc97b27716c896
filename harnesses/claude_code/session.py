"""The Claude Code session parser: a run's metrics, transcript, provider error and pending tool use
from `stdout.log` (the stream-json events) and `session.jsonl` (Claude Code's transcript, copied out
of the config directory), plus the command line of the run, so stored sessions can be parsed again
later.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnesses.cli_harness import round_cost
from harnesses.logs import (
    ToolLog,
    as_int,
    as_str,
    carries_usage,
    derive_behaviour,
    optional_int,
    read_jsonl,
    record_compactions,
    result_text,
    unreadable_lines,
)
from rig.schema import Metrics, ModelUsage, Transcript, TranscriptStep, TranscriptToolCall

COST_SOURCE = "harness"
# Claude Code before some version after 2.1.197 (2.1.163 included) records no thinking count: its
# output tokens hold the thinking tokens, how many is not in its files. Totals and cost stay exact,
# so the gap is noted without making the metrics incomplete (an upgrade study compares them).
NO_THINKING_GAP = (
    "thinking tokens not recorded by this Claude Code version (they are inside the output tokens)"
)
# The entry kinds without one of which a saved stream or transcript is of an unknown format.
STREAM_KINDS = frozenset({"system", "assistant", "user", "result"})
TRANSCRIPT_KINDS = frozenset({"user", "assistant"})
# The --settings that turn thinking off and the tool that invokes a skill: the parser reads with them
# what the run asked for (its command line) and did (its session).
THINKING_OFF_SETTINGS = '{"alwaysThinkingEnabled":false}'
SKILL_TOOL = "Skill"
SYNTHETIC_MODEL = "<synthetic>"
# The system message Claude Code writes where a compaction replaced the conversation with a summary.
COMPACT_BOUNDARY = "compact_boundary"
# What 2.1.332 files as an API error (`apiError` on its synthetic message, `api_error` on the
# result) although the provider did not fail: auto-compaction thrashing, its breaker stopping a run
# whose context refilled to the limit right after each of 3 compactions.
OWN_ERRORS = frozenset({"autocompact_thrashing"})
API_ERROR_PREFIX = "API Error"


def usage_of(usage: dict[str, Any]) -> ModelUsage:
    """The tokens of an Anthropic `usage` object (a response's, or the result's sums); thinking is a
    part of output_tokens, where the version reports it (2.1.332, not 2.1.197: NO_THINKING_GAP)."""
    details = usage.get("output_tokens_details")
    return ModelUsage(
        input_tokens=as_int(usage.get("input_tokens")),
        output_tokens=as_int(usage.get("output_tokens")),
        cache_read_tokens=as_int(usage.get("cache_read_input_tokens")),
        cache_write_tokens=as_int(usage.get("cache_creation_input_tokens")),
        reasoning_tokens=as_int(details.get("thinking_tokens")) if isinstance(details, dict) else 0,
    )


@dataclass
class _Message:
    """One model response, gathered from its per-block events."""

    id: str
    model: str | None = None
    blocks: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    api_error: bool = False
    timestamp: str | None = None


@dataclass
class Session:
    """What the saved files of one run say, before it is folded into Metrics."""

    cwd: str | None = None
    init_model: str | None = None
    session_id: str | None = None
    prompt: str | None = None
    messages: list[_Message] = field(default_factory=list)
    tool_results: dict[str, tuple[str, bool]] = field(default_factory=dict)
    retries: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    unread_usage: set[str] = field(default_factory=set)
    # The saved files with entries of which none is of a kind Claude Code writes.
    unknown_files: list[str] = field(default_factory=list)
    # The compact_metadata of each compact_boundary, from the stream and from the transcript.
    stream_compactions: list[dict[str, Any]] = field(default_factory=list)
    transcript_compactions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def api_error(self) -> bool:
        """A provider error as Claude Code reports it: an API-error message that ended the
        conversation (one it went on from was recovered from), or an erroring result."""
        if self.messages and self.messages[-1].api_error:
            return True
        result = self.result or {}
        # An API failure ends as subtype "success" with is_error true; other subtypes
        # (error_max_turns, error_during_execution) are the agent's or the CLI's own doing, as are
        # the OWN_ERRORS 2.1.332 names in api_error.
        return (
            result.get("is_error") is True
            and result.get("subtype") == "success"
            and as_str(result.get("api_error")) not in OWN_ERRORS
        )


def load_session(stdout_path: Path | None, transcript_path: Path | None) -> Session:
    """Merge the stream-json events and the transcript of one run into a Session.

    The stream gives one `assistant` event per content block with the usage at the start of the
    response; the transcript gives the same blocks with the final usage and stop reason. Both
    are keyed by message id, so a response cut from one file is still found in the other.
    """
    session = Session()
    messages: dict[str, _Message] = {}
    from_stream: set[str] = set()
    stream, transcript = read_jsonl(stdout_path), read_jsonl(transcript_path)
    for name, entries, known in (
        ("stream-json", stream, STREAM_KINDS),
        ("transcript", transcript, TRANSCRIPT_KINDS),
    ):
        if entries and not any(e.get("type") in known for e in entries):
            session.unknown_files.append(name)
    for event in stream:
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            session.cwd = as_str(event.get("cwd")) or session.cwd
            session.init_model = as_str(event.get("model")) or session.init_model
            session.session_id = as_str(event.get("session_id")) or session.session_id
        elif kind == "system" and event.get("subtype") == "api_retry":
            session.retries.append(event)
        elif kind == "system" and event.get("subtype") == COMPACT_BOUNDARY:
            session.stream_compactions.append(_dict(event.get("compact_metadata")))
        elif kind == "result":
            session.result = event
        elif kind == "assistant":
            entry = _add_block(messages, event, stream=True)
            if entry is not None:
                from_stream.add(entry.id)
        elif kind == "user":
            _collect_tool_results(session, event)
        elif carries_usage(event):
            session.unread_usage.add(str(kind))
    for record in transcript:
        kind = record.get("type")
        if kind == "system" and record.get("subtype") == COMPACT_BOUNDARY:
            session.transcript_compactions.append(_dict(record.get("compactMetadata")))
        elif kind == "assistant":
            body = record.get("message")
            message_id = body.get("id") if isinstance(body, dict) else None
            # Blocks the stream already gave are not counted twice; usage and stop reason are taken.
            _add_block(messages, record, stream=False, blocks=message_id not in from_stream)
        elif kind == "user":
            _collect_tool_results(session, record)
            body = record.get("message")
            # The task's prompt is the first user message of the main conversation with text content.
            if session.prompt is None and isinstance(body, dict) and not record.get("isSidechain"):
                session.prompt = as_str(body.get("content"))
        if session.cwd is None and isinstance(record.get("cwd"), str):
            session.cwd = record["cwd"]
        session.session_id = session.session_id or as_str(record.get("sessionId"))
    session.messages = list(messages.values())
    return session


def _add_block(
    messages: dict[str, _Message], event: dict[str, Any], stream: bool, blocks: bool = True
) -> _Message | None:
    message = event.get("message")
    if not isinstance(message, dict):
        return None
    message_id = as_str(message.get("id")) or as_str(event.get("uuid"))
    if message_id is None:
        return None
    entry = messages.setdefault(message_id, _Message(message_id))
    entry.model = entry.model or as_str(message.get("model"))
    entry.timestamp = entry.timestamp or as_str(event.get("timestamp"))
    content = message.get("content") if isinstance(message.get("content"), list) else []
    if blocks:
        entry.blocks.extend(b for b in content if isinstance(b, dict))
    synthetic = message.get("model") == SYNTHETIC_MODEL
    texts = [str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"]
    # The transcript says isApiErrorMessage; 2.1.332's stream says is_api_error_message, 2.1.197's
    # stream said nothing but the synthetic model, an `error` and the text.
    own = (as_str(event.get("apiError")) or as_str(event.get("api_error"))) in OWN_ERRORS
    if not own and (
        event.get("isApiErrorMessage") is True
        or event.get("is_api_error_message") is True
        or (synthetic and (event.get("error") or any(t.startswith(API_ERROR_PREFIX) for t in texts)))
    ):
        entry.api_error = True
    usage = message.get("usage")
    # The stream's usage is a snapshot at the start of the response; the transcript's is final.
    if isinstance(usage, dict) and (not stream or not entry.usage):
        entry.usage = usage
    if not stream and isinstance(message.get("stop_reason"), str):
        entry.stop_reason = message["stop_reason"]
    return entry


def _collect_tool_results(session: Session, event: dict[str, Any]) -> None:
    for block in _blocks(event, "tool_result"):
        session.tool_results[str(block.get("tool_use_id"))] = (
            result_text(block.get("content")),
            block.get("is_error") is True,
        )


def _blocks(event: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The content blocks of type `kind` of a stream event or transcript record."""
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def pending_tool_use(events: list[dict[str, Any]]) -> bool:
    """Whether, in stream events or transcript records, the last response's tool_use blocks had
    not all got a tool_result (see `ToolLog.pending`).

    A response is one message id; Claude Code prints one event per content block. A subagent's
    messages (`parent_tool_use_id`, `isSidechain`) run inside the main agent's pending Task call
    and are left out.
    """
    tools = ToolLog()
    current: str | None = None
    for event in events:
        if event.get("parent_tool_use_id") or event.get("isSidechain") is True:
            continue
        if event.get("type") == "assistant" and isinstance(event.get("message"), dict):
            message_id = as_str(event["message"].get("id")) or as_str(event.get("uuid"))
            if message_id != current:
                tools.response()
                current = message_id
            for block in _blocks(event, "tool_use"):
                tools.call(as_str(block.get("id")))
        elif event.get("type") == "user":
            for block in _blocks(event, "tool_result"):
                tools.result(as_str(block.get("tool_use_id")), "", block.get("is_error") is True)
    return tools.pending


def read_transcript(stdout_path: Path | None, transcript_path: Path | None) -> Transcript:
    """The steps of one Claude Code run: the prompt (from the transcript), one agent step per
    response as `load_session` merges them (an API-error message too, as parse_files counts it),
    each retry the stream reports as a system step before the response it preceded, and an
    erroring `result` that no API-error message stands for as a last system step.

    Per-turn tokens are each response's final usage; Claude Code records no cost per response.
    """
    session = load_session(stdout_path, transcript_path)
    models = [m.model for m in session.messages if m.model and m.model != SYNTHETIC_MODEL]
    transcript = Transcript(
        harness="claude-code",
        session_id=session.session_id,
        model=models[0] if models else session.init_model,
        gaps=unreadable_lines(stdout_path) + unreadable_lines(transcript_path),
    )
    if session.prompt:
        transcript.steps.append(TranscriptStep(source="user", text=session.prompt))
    retries = _retries_before(read_jsonl(stdout_path))
    for index, message in enumerate(session.messages):
        transcript.steps += [_retry_step(r) for r in retries.pop(index, [])]
        transcript.steps.append(_turn(message, session.tool_results))
    transcript.steps += [_retry_step(r) for index in sorted(retries) for r in retries[index]]
    result = session.result or {}
    if result.get("is_error") is True and not any(m.api_error for m in session.messages):
        text = result.get("result") or result.get("subtype")
        transcript.steps.append(TranscriptStep(source="system", text=f"[error] {text}"))
    if not session.messages and not session.prompt:
        transcript.gaps.append("neither the stream nor the transcript holds a message")
    return transcript


def _retries_before(stream: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """The stream's `api_retry` events by how many responses the stream had shown before each."""
    seen: list[str] = []
    retries: dict[int, list[dict[str, Any]]] = {}
    for event in stream:
        message = event.get("message") if isinstance(event.get("message"), dict) else {}
        message_id = as_str(message.get("id")) or as_str(event.get("uuid"))
        if event.get("type") == "assistant" and message_id and message_id not in seen:
            seen.append(message_id)
        elif event.get("type") == "system" and event.get("subtype") == "api_retry":
            retries.setdefault(len(seen), []).append(event)
    return retries


def _retry_step(retry: dict[str, Any]) -> TranscriptStep:
    return TranscriptStep(
        source="system",
        text=f"[retry {retry.get('attempt')}/{retry.get('max_retries')}] {retry.get('error')} "
        f"(HTTP {retry.get('error_status')})",
    )


def _turn(message: _Message, results: dict[str, tuple[str, bool]]) -> TranscriptStep:
    """One response as an agent step, each tool call with the result it got (if any)."""
    texts, thoughts, calls = [], [], []
    for block in message.blocks:
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "thinking":
            thoughts.append(str(block.get("thinking", "")))
        elif block.get("type") == "tool_use":
            call_id = as_str(block.get("id"))
            arguments = block.get("input")
            result = results.get(call_id) if call_id else None
            calls.append(
                TranscriptToolCall(
                    id=call_id,
                    name=str(block.get("name")),
                    arguments=arguments if isinstance(arguments, dict | str) else {},
                    output=result[0] if result else None,
                    is_error=result[1] if result else None,
                )
            )
    usage = message.usage
    details = (
        usage.get("output_tokens_details") if isinstance(usage.get("output_tokens_details"), dict) else {}
    )
    return TranscriptStep(
        source="agent",
        text="\n".join(texts),
        reasoning="\n".join(thoughts) or None,
        model=None if message.model == SYNTHETIC_MODEL else message.model,
        tool_calls=calls,
        input_tokens=optional_int(usage.get("input_tokens")),
        output_tokens=optional_int(usage.get("output_tokens")),
        cache_read_tokens=optional_int(usage.get("cache_read_input_tokens")),
        cache_write_tokens=optional_int(usage.get("cache_creation_input_tokens")),
        reasoning_tokens=optional_int(details.get("thinking_tokens")),
        timestamp=message.timestamp,
    )


def parse_files(stdout_path: Path | None, transcript_path: Path | None, command: list[str]) -> Metrics:
    """Metrics of one Claude Code run from its saved stream, transcript and command line."""
    session = load_session(stdout_path, transcript_path)
    metrics = Metrics(thinking_level=_thinking_level(command))
    models = [m.model for m in session.messages if m.model and m.model != SYNTHETIC_MODEL]
    metrics.model = models[0] if models else session.init_model
    tools = ToolLog()
    skill_invoked = False
    final_texts: list[str] | None = None
    last = len(session.messages) - 1
    for index, message in enumerate(session.messages):
        metrics.assistant_messages += 1
        texts = []
        has_tool = False
        for block in message.blocks:
            if block.get("type") == "text":
                texts.append(str(block.get("text", "")))
            elif block.get("type") == "tool_use":
                has_tool = True
                name = str(block.get("name"))
                tool_input = block.get("input") if isinstance(block.get("input"), dict) else {}
                metrics.tool_calls += 1
                metrics.tool_calls_by_name[name] = metrics.tool_calls_by_name.get(name, 0) + 1
                call_id = as_str(block.get("id"))
                if name == "Bash" and isinstance(tool_input.get("command"), str):
                    metrics.bash_commands.append(tool_input["command"])
                    tools.shell(call_id, tool_input["command"])
                elif name == "Read" and isinstance(tool_input.get("file_path"), str):
                    tools.read(call_id, tool_input["file_path"])
                else:
                    tools.call(call_id)
                    skill_invoked = skill_invoked or name == SKILL_TOOL
        stop_reason = _stop_reason(message, has_tool, session.result if index == last else None)
        metrics.stop_reasons.append(stop_reason)
        if message.api_error:
            metrics.error_messages.append("\n".join(texts))
        elif stop_reason == "end_turn":
            final_texts = texts
    for call_id, (text, is_error) in session.tool_results.items():
        tools.result(call_id, text, is_error)
        metrics.tool_errors += is_error
    for retry in session.retries:
        metrics.error_messages.append(
            f"retry {retry.get('attempt')}/{retry.get('max_retries')}: {retry.get('error')} "
            f"(HTTP {retry.get('error_status')})"
        )
    metrics.transport_failures = len(session.retries) + sum(m.api_error for m in session.messages)
    result = session.result
    if (
        result is not None
        and result.get("is_error") is True
        and not any(m.api_error for m in session.messages)
    ):
        metrics.error_messages.append(str(result.get("result") or result.get("subtype")))
    _fold_usage(metrics, session)
    _fold_compactions(metrics, session)
    if metrics.total_tokens == 0 and any(not m.api_error for m in session.messages):
        metrics.incomplete("no token usage recorded although the model responded")
    for kind in sorted(session.unread_usage):
        metrics.incomplete(f"usage in stream-json events of type {kind!r}, not read")
    for name in session.unknown_files:
        metrics.incomplete(f"{name} of a format this parser does not know (no entry of a type it reads)")
    if result is not None and result.get("is_error") is False and isinstance(result.get("result"), str):
        metrics.final_text = result["result"]
    elif result is None and final_texts is not None:
        metrics.final_text = "\n".join(final_texts)
    derive_behaviour(
        metrics, tools.read_paths(), session.cwd, skill_invoked=skill_invoked, attempted=tools.read_attempts()
    )
    return metrics


def _fold_usage(metrics: Metrics, session: Session) -> None:
    """Totals from the `result` event (Claude Code's own sums); else the per-message usage.

    The result's `usage` counts the main model only, while its `total_cost_usd` covers every model
    of `modelUsage` (side requests, subagents): where `modelUsage` is there, tokens and cost come
    per model from it (`per_model`) and the totals are their sums, so tokens and cost agree.
    """
    result = session.result
    usage = result.get("usage") if result is not None else None
    by_model = result.get("modelUsage") if result is not None else None
    if isinstance(by_model, dict) and by_model and all(isinstance(u, dict) for u in by_model.values()):
        _fold_model_usage(metrics, by_model)
        return
    if isinstance(usage, dict):
        totals = [usage]
        cost = result.get("total_cost_usd") if result is not None else None
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            metrics.cost_usd = round_cost(float(cost))
            metrics.cost_source = COST_SOURCE
    else:
        # Killed before the end: the transcript's final usage per response is the best there is.
        totals = [m.usage for m in session.messages]
    for item in totals:
        metrics.add_tokens(usage_of(item))
        if not isinstance(item.get("output_tokens_details"), dict) and as_int(item.get("output_tokens")):
            metrics.unrecorded(NO_THINKING_GAP)
    metrics.total_tokens = (
        metrics.input_tokens + metrics.output_tokens + metrics.cache_read_tokens + metrics.cache_write_tokens
    )


def _fold_compactions(metrics: Metrics, session: Session) -> None:
    """The run's compactions: one compact_boundary each, in the transcript (camelCase metadata) or,
    where the transcript has none, the stream (snake_case), with the context's tokens before and
    after it. The summarization request's usage is in Claude Code's totals, not told apart. Files
    that hold nothing of a session say nothing of compactions either."""
    if session.session_id is None and not session.messages and session.result is None:
        return
    if session.transcript_compactions:
        pairs = [(m.get("preTokens"), m.get("postTokens")) for m in session.transcript_compactions]
    else:
        pairs = [(m.get("pre_tokens"), m.get("post_tokens")) for m in session.stream_compactions]
    record_compactions(metrics, [(optional_int(pre), optional_int(post)) for pre, post in pairs])


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _fold_model_usage(metrics: Metrics, by_model: dict[str, dict[str, Any]]) -> None:
    """Tokens and cost per model from the result's `modelUsage`, and totals that are their sums."""
    costs: list[float] = []
    for model, item in by_model.items():
        part = ModelUsage(
            input_tokens=as_int(item.get("inputTokens")),
            output_tokens=as_int(item.get("outputTokens")),
            cache_read_tokens=as_int(item.get("cacheReadInputTokens")),
            cache_write_tokens=as_int(item.get("cacheCreationInputTokens")),
            # Thinking is a part of outputTokens (2.1.332 reports it; 2.1.197 did not).
            reasoning_tokens=as_int(item.get("thinkingTokens")),
        )
        part.total_tokens = (
            part.input_tokens + part.output_tokens + part.cache_read_tokens + part.cache_write_tokens
        )
        cost = item.get("costUSD")
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            part.cost_usd = round_cost(float(cost))
            costs.append(float(cost))
        else:
            metrics.incomplete(f"modelUsage of {model!r} has no costUSD")
        metrics.per_model[str(model)] = part
        metrics.add_tokens(part)
    if metrics.output_tokens and not any("thinkingTokens" in item for item in by_model.values()):
        metrics.unrecorded(NO_THINKING_GAP)
    if costs:
        metrics.cost_usd = round_cost(sum(costs))
        metrics.cost_source = COST_SOURCE


def _stop_reason(message: _Message, has_tool: bool, result: dict[str, Any] | None) -> str:
    """The response's stop reason; "error" for Claude Code's synthetic API-error messages."""
    if message.api_error:
        return "error"
    if message.stop_reason:
        return message.stop_reason
    # Only the stream survived (no transcript): infer what the transcript would have said.
    if has_tool:
        return "tool_use"
    if result is not None and isinstance(result.get("stop_reason"), str):
        return str(result["stop_reason"])
    return "end_turn"


def _thinking_level(command: list[str]) -> str | None:
    """The thinking level the command line asked for: the --effort value, "off", or None."""
    for i, arg in enumerate(command):
        if arg == "--":
            break
        if arg == "--effort" and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith("--effort="):
            return arg.split("=", 1)[1]
        if arg == f"--settings={THINKING_OFF_SETTINGS}":
            return "off"
    return None

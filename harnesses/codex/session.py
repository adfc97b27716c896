"""The Codex session parser: a run's metrics, transcript, failure signature and pending tool call
from its saved rollout copy (`session.jsonl`) and its `--json` event stream (`stdout.log`) alone, so
stored sessions can be parsed again by later versions of the rig (see `parse_files` for which fact
comes from where).

Cost: Codex reports none. It is computed with `genai-prices` for each model response (its tiers
apply per request) at the response's time, as provider `openai`. The mock runs under a real slug,
so a mock run is priced as that model would have cost for the mock's token counts.
"""

import json
import posixpath
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import genai_prices

from harnesses.cli_harness import round_cost
from harnesses.logs import (
    ToolLog,
    as_int,
    as_str,
    as_time,
    carries_usage,
    derive_behaviour,
    optional_int,
    read_jsonl,
    record_compactions,
    unreadable_lines,
)
from rig.confine.run_budget import LiveUsage
from rig.schema import Metrics, ModelUsage, Transcript, TranscriptStep, TranscriptToolCall

PRICE_PROVIDER = "openai"
COST_SOURCE = f"genai-prices {genai_prices.__version__}"
TURN_FAILED_SIGNATURE = "codex_turn_failed"
# Failures that are the agent's own doing (its context, its budget, the model refusing), not the
# provider's: a run ending in one of them is scored like any other.
AGENT_FAILURES = frozenset(
    {
        "context_window_exceeded",
        "session_budget_exceeded",
        "cyber_policy",
        "bio_policy",
        "misalignment_policy_violation",
        "too_many_denials",
        "inference_hook_denied",
    }
)
# An exec_command/write_stdin output that reports a process (it ran, whatever its exit code).
_PROCESS_REPORT = re.compile(r"^Process (exited with code -?\d+|running with session ID \d+)", re.MULTILINE)
_CALL_ITEMS = {
    "function_call": None,
    "custom_tool_call": None,
    "local_shell_call": "local_shell",
    "web_search_call": "web_search",
    "tool_search_call": "tool_search",
    "image_generation_call": "image_generation",
}
_OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output", "tool_search_output"})
# Rollout entry types of the formats this parser knows (0.40 to 0.171): a rollout with none is another format.
_ROLLOUT_TYPES = frozenset(
    {"session_meta", "turn_context", "response_item", "event_msg", "token_usage_record"}
)
# Stream event types whose usage is read (turn.completed) or that carry none.
_STREAM_TYPES = frozenset(
    {
        "thread.started",
        "turn.started",
        "turn.completed",
        "turn.failed",
        "item.started",
        "item.updated",
        "item.completed",
        "error",
    }
)
# Calls the provider carries out itself: Codex never runs them, and no output item follows.
_PROVIDER_CALLS = frozenset({"web_search_call", "image_generation_call"})
# Stream items of the tools Codex runs, from item.started to item.completed.
_STREAM_TOOL_ITEMS = frozenset({"command_execution", "file_change", "mcp_tool_call"})
_SHELL_TOOLS = frozenset({"exec_command", "shell", "local_shell", "container.exec"})


def parse_files(session_path: Path | None, stdout_path: Path | None) -> Metrics:
    """Metrics of one Codex run from its rollout copy and its `--json` event stream.

    The rollout is the richer record and is preferred; the stream is the fallback for a run whose
    rollout is missing. From the rollout: model and effort (`turn_context`), tokens, responses and
    cost (one `token_usage_record` per model response), tool calls by name (`function_call`,
    `custom_tool_call` ... items), shell commands (the `cmd` the model gave `exec_command`, before
    Codex wraps it in `bash -lc`), tool errors (a call whose output says the tool did not run:
    unparsable arguments, an unknown tool, a process that could not start, a patch that did not
    apply; a command exiting non-zero is not one) and reads (the files a command printed, less
    those its output reports missing: `harnesses.logs.ToolLog`). From the stream: turn outcomes as
    stop reasons (`completed`, `error`), error messages and transport failures (each `error` event
    is one failed model request: a retry notice, or the failure that ended the turn), the final
    answer.
    """
    rollout, stream = read_jsonl(session_path), read_jsonl(stdout_path)
    metrics = Metrics()
    meta = next((_payload(e) for e in rollout if e.get("type") == "session_meta"), {})
    cwd = meta.get("cwd") if isinstance(meta.get("cwd"), str) else None
    tools = ToolLog()
    if rollout:
        _fold_rollout(metrics, rollout, stream, tools)
    elif any(e.get("type") == "turn.completed" and isinstance(e.get("usage"), dict) for e in stream):
        _fold_stream_usage(metrics, stream)
        _fold_stream_tools(metrics, stream, tools)
    _fold_outcomes(metrics, rollout, stream)
    if rollout:
        fold_compactions(metrics, rollout)
    if metrics.total_tokens == 0 and (metrics.tool_calls or metrics.final_text):
        metrics.incomplete("no token usage recorded although the model responded")
    for event in stream:
        if event.get("type") not in _STREAM_TYPES and _unread_usage(event.get("type"), event):
            metrics.incomplete(f"usage in stream events of type {event.get('type')!r}, not read")
    derive_behaviour(metrics, tools.read_paths(), cwd, attempted=tools.read_attempts())
    return metrics


def read_transcript(session_path: Path | None, stdout_path: Path | None) -> Transcript:
    """The steps of one Codex run.

    From the rollout: the prompt (Codex's `user_message` event, or the completed `UserMessage`
    item: the rollout's other user-role messages are the context Codex adds), and one agent step
    per model response: the assistant-side items (reasoning, messages, calls) and the response's
    `token_usage_record` (0.40 to 0.125: its `token_count`, which 0.40 writes before the items),
    which gives its tokens, each call with its output item. The failures of
    the stream (`error` events, a `turn.failed` not announced before) become system steps, placed
    after as many steps' items as the stream had completed before them; without a stream, the
    rollout's failed turn ends do. Without a rollout, each completed item of the stream is a step
    of its own, with no tokens. Codex records no cost (the rig prices its responses as a whole).
    """
    rollout, stream = read_jsonl(session_path), read_jsonl(stdout_path)
    meta = next((_payload(e) for e in rollout if e.get("type") == "session_meta"), {})
    transcript = Transcript(
        harness="codex",
        session_id=as_str(meta.get("id")),
        gaps=unreadable_lines(session_path) + unreadable_lines(stdout_path),
    )
    prompt = _rollout_prompt(rollout)
    if prompt:
        transcript.steps.append(TranscriptStep(source="user", text=prompt))
    steps = _rollout_steps(rollout) if rollout else _stream_steps(stream)
    transcript.model = next((s.model for s in steps if s.model), None)
    failures = _stream_failures(stream) if stream else _rollout_failures(rollout)
    done = 0
    for step in steps:
        done += len(step.tool_calls) + bool(step.text)
        while failures and failures[0][0] < done:
            transcript.steps.append(failures.pop(0)[1])
        transcript.steps.append(step)
    transcript.steps += [step for _, step in failures]
    if not rollout and not stream:
        transcript.gaps.append("neither the rollout nor the event stream was saved")
    return transcript


def _rollout_prompt(rollout: list[dict[str, Any]]) -> str | None:
    for entry in rollout:
        payload = _payload(entry)
        if entry.get("type") != "event_msg":
            continue
        if payload.get("type") == "user_message":
            return as_str(payload.get("message"))
        item = payload.get("item") if isinstance(payload.get("item"), dict) else {}
        if payload.get("type") == "item_completed" and item.get("type") == "UserMessage":
            return _output_text(item.get("content")) or None
    return None


def _rollout_steps(rollout: list[dict[str, Any]]) -> list[TranscriptStep]:
    """One agent step per model response of the rollout (see `read_transcript`)."""
    steps: list[TranscriptStep] = []
    calls: dict[str, TranscriptToolCall] = {}
    current: TranscriptStep | None = None
    # Whether the current step may take more items: a tool output or a user message ends a response.
    open_items = False
    model: str | None = None
    usages = _response_usages(rollout)
    first_item = next(
        (
            i
            for i, e in enumerate(rollout)
            if e.get("type") == "response_item" and _assistant_side(_payload(e))
        ),
        len(rollout),
    )
    usage_first = bool(usages) and min(usages) < first_item
    for index, entry in enumerate(rollout):
        kind, payload = entry.get("type"), _payload(entry)
        if kind == "turn_context" and isinstance(payload.get("model"), str):
            model = payload["model"]
        elif index in usages:
            if usage_first or current is None or current.output_tokens is not None:
                current = TranscriptStep(
                    source="agent", model=model, timestamp=as_str(entry.get("timestamp"))
                )
                steps.append(current)
            _step_usage(current, usages[index])
            # Codex 0.40 records a response's usage before its items: they belong to this step.
            open_items = usage_first
        elif kind == "response_item":
            item = payload.get("type")
            if _assistant_side(payload):
                if current is None or not open_items:
                    current = TranscriptStep(
                        source="agent", model=model, timestamp=as_str(entry.get("timestamp"))
                    )
                    steps.append(current)
                    open_items = True
                _add_item(current, payload, calls)
            elif item in _OUTPUT_ITEMS:
                open_items = False
                call = calls.get(str(payload.get("call_id")))
                if call is not None:
                    call.output = _output_text(payload.get("output"))
                    call.is_error = _tool_failed(call.name, payload.get("output"))
            elif payload.get("role") == "user":
                open_items = False
    return steps


def _assistant_side(payload: dict[str, Any]) -> bool:
    """Whether a response item is the model's (a call, reasoning or an assistant message)."""
    return (
        payload.get("type") in _CALL_ITEMS
        or payload.get("type") == "reasoning"
        or payload.get("role") == "assistant"
    )


def _response_usages(rollout: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The usage of each model response by the index of the rollout entry that records it: the
    `token_usage_record`s (0.171), else each `token_count` whose totals changed (0.40 to 0.125)."""
    records = {
        i: _payload(e)["usage"]
        for i, e in enumerate(rollout)
        if e.get("type") == "token_usage_record" and isinstance(_payload(e).get("usage"), dict)
    }
    if records:
        return records
    counts: dict[int, dict[str, Any]] = {}
    last_total: Any = None
    for i, entry in enumerate(rollout):
        payload = _payload(entry)
        info = payload.get("info") if payload.get("type") == "token_count" else None
        if entry.get("type") != "event_msg" or not isinstance(info, dict):
            continue
        if info.get("total_token_usage") == last_total:
            continue
        last_total = info.get("total_token_usage")
        last = info.get("last_token_usage")
        counts[i] = last if isinstance(last, dict) else {}
    return counts


def _add_item(step: TranscriptStep, payload: dict[str, Any], calls: dict[str, TranscriptToolCall]) -> None:
    """One assistant-side response item into its step."""
    item = payload.get("type")
    if item == "reasoning":
        parts = [*(payload.get("summary") or []), *(payload.get("content") or [])]
        text = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
        step.reasoning = "\n".join(t for t in (step.reasoning, text) if t) or None
    elif item in _CALL_ITEMS:
        arguments: Any = payload.get("arguments", payload.get("input", payload.get("action")))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                pass
        call = TranscriptToolCall(
            id=as_str(payload.get("call_id")),
            name=_CALL_ITEMS[item] or str(payload.get("name")),
            arguments=arguments if isinstance(arguments, dict | str) else {},
        )
        step.tool_calls.append(call)
        if call.id:
            calls[call.id] = call
    else:
        text = _output_text(payload.get("content"))
        step.text = "\n".join(t for t in (step.text, text) if t)


def _step_usage(step: TranscriptStep, usage: dict[str, Any]) -> None:
    """A response's tokens, in the rig's terms (input without the cached and written tokens)."""
    everything = as_int(usage.get("input_tokens"))
    cached, written = as_int(usage.get("cached_input_tokens")), as_int(usage.get("cache_write_input_tokens"))
    step.input_tokens = everything - cached - written
    step.cache_read_tokens = cached
    step.cache_write_tokens = written
    step.output_tokens = as_int(usage.get("output_tokens"))
    step.reasoning_tokens = optional_int(usage.get("reasoning_output_tokens"))


def _stream_steps(stream: list[dict[str, Any]]) -> list[TranscriptStep]:
    """Each completed item of the stream as an agent step, for a run without a rollout."""
    steps = []
    for event in stream:
        item = event.get("item") if event.get("type") == "item.completed" else None
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "agent_message":
            steps.append(TranscriptStep(source="agent", text=str(item.get("text", ""))))
        elif kind in ("command_execution", "file_change", "mcp_tool_call", "web_search"):
            name = {"command_execution": "exec_command", "file_change": "apply_patch"}.get(
                str(kind), str(item.get("tool") or kind)
            )
            arguments = {k: v for k, v in item.items() if k in ("command", "changes", "arguments", "query")}
            failed = item.get("status") == "failed" or (
                kind == "command_execution"
                and (not isinstance(item.get("exit_code"), int) or item["exit_code"] < 0)
            )
            call = TranscriptToolCall(
                id=as_str(item.get("id")),
                name=name,
                arguments=arguments,
                output=str(item.get("aggregated_output") or ""),
                is_error=failed,
            )
            steps.append(TranscriptStep(source="agent", tool_calls=[call]))
    return steps


def _stream_failures(stream: list[dict[str, Any]]) -> list[tuple[int, TranscriptStep]]:
    """The stream's failures as system steps, each with how many items had completed before it."""
    failures: list[tuple[int, TranscriptStep]] = []
    done = 0
    last: str | None = None
    for event in stream:
        kind = event.get("type")
        item = event.get("item") if isinstance(event.get("item"), dict) else {}
        if kind == "item.completed" and item.get("type") != "reasoning":
            if item.get("type") == "error":
                failures.append(
                    (done, TranscriptStep(source="system", text=f"[error] {item.get('message', '')}"))
                )
            else:
                done += 1
        elif kind == "error":
            last = str(event.get("message", ""))
            failures.append((done, TranscriptStep(source="system", text=f"[error] {last}")))
        elif kind == "turn.failed":
            message = str((event.get("error") or {}).get("message", ""))
            if message != last:
                failures.append((done, TranscriptStep(source="system", text=f"[turn failed] {message}")))
    return failures


def _rollout_failures(rollout: list[dict[str, Any]]) -> list[tuple[int, TranscriptStep]]:
    """The rollout's failed turn ends as system steps after everything, for a run without a stream."""
    return [
        (
            sys.maxsize,
            TranscriptStep(source="system", text=f"[turn failed] {payload['error'].get('message', '')}"),
        )
        for payload in map(_payload, rollout)
        if payload.get("type") == "task_complete" and isinstance(payload.get("error"), dict)
    ]


def fold_compactions(metrics: Metrics, rollout: list[dict[str, Any]]) -> None:
    """How many times Codex compacted the context: its `compacted` rollout items (the summary and
    the history that replaced the conversation), or its `context_compacted` events where they are
    more. Neither says how large the context was before or after. 0.171's item names the
    summarization response (`compaction_response_id`) and repeats its `token_usage_record`
    (`latest_token_usage_record`, already in the totals): the tokens it spent, where every item
    says so. The exec stream records no compaction."""
    items = [_payload(e) for e in rollout if e.get("type") == "compacted"]
    events = sum(
        1 for e in rollout if e.get("type") == "event_msg" and _payload(e).get("type") == "context_compacted"
    )
    spent: list[int] = []
    for item in items:
        record = item.get("latest_token_usage_record")
        response = as_str(item.get("compaction_response_id"))
        if (
            response is not None
            and isinstance(record, dict)
            and as_str(record.get("response_id")) == response
            and isinstance(record.get("usage"), dict)
        ):
            spent.append(as_int(record["usage"].get("total_tokens")))
    known = len(spent) == len(items) >= events
    record_compactions(metrics, [(None, None)] * max(len(items), events), sum(spent) if known else None)


def _fold_rollout(
    metrics: Metrics, rollout: list[dict[str, Any]], stream: list[dict[str, Any]], tools: ToolLog
) -> None:
    """Model, tokens, cost, tool calls and tool errors from the rollout's entries, in order.

    Usage comes from one `token_usage_record` per response (Codex 0.171); else from the
    `token_count` events (0.40 to 0.125, and 0.171 beside the records); else from the stream's
    `turn.completed` totals. A rollout of a format this parser does not know, or with usage in
    entries it does not read, marks the metrics incomplete.
    """
    model: str | None = None
    records: list[tuple[str | None, str | None, dict[str, Any]]] = []
    counts: list[tuple[str | None, str | None, dict[str, Any]]] = []
    last_total: dict[str, Any] | None = None
    total: dict[str, Any] | None = None
    for entry in rollout:
        kind, payload = entry.get("type"), _payload(entry)
        if kind == "turn_context":
            model = payload.get("model") if isinstance(payload.get("model"), str) else model
            metrics.model = model
            settings = (payload.get("collaboration_mode") or {}).get("settings") or {}
            effort = payload.get("effort") or settings.get("reasoning_effort")
            metrics.thinking_level = effort if isinstance(effort, str) else metrics.thinking_level
        elif kind == "token_usage_record" and isinstance(payload.get("usage"), dict):
            records.append((model, entry.get("timestamp"), payload["usage"]))
        elif kind == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info")
            if not isinstance(info, dict) or not isinstance(info.get("total_token_usage"), dict):
                continue
            # Codex re-announces the same totals (e.g. with new rate limits): one response each change.
            if info["total_token_usage"] == last_total:
                continue
            last_total = total = info["total_token_usage"]
            last = info.get("last_token_usage")
            counts.append((model, entry.get("timestamp"), last if isinstance(last, dict) else {}))
        elif _unread_usage(kind, payload):
            metrics.incomplete(f"usage in rollout entries of type {_entry_kind(kind, payload)!r}, not read")
    if not any(entry.get("type") in _ROLLOUT_TYPES for entry in rollout):
        metrics.incomplete(
            "rollout of a format this parser does not know (no session_meta, response_item ...)"
        )
    _fold_rollout_tools(metrics, rollout, tools)
    if records:
        metrics.assistant_messages = len(records)
        for _, _, usage in records:
            _add_usage(metrics, usage)
        metrics.cost_usd, metrics.cost_source = price(records)
    elif counts and total is not None:
        metrics.assistant_messages = len(counts)
        _add_usage(metrics, total)
        if any(not usage for _, _, usage in counts):
            metrics.incomplete("token_count events without last_token_usage: cost not priced per response")
        else:
            metrics.cost_usd, metrics.cost_source = price(counts)
    elif any(e.get("type") == "turn.completed" and isinstance(e.get("usage"), dict) for e in stream):
        _fold_stream_usage(metrics, stream)


def _fold_rollout_tools(metrics: Metrics, rollout: list[dict[str, Any]], tools: ToolLog) -> None:
    """Tool calls, shell commands and tool errors from the rollout's items, into `metrics` and `tools`.

    A response is a run of assistant-side items (messages, reasoning, calls); a tool output or a
    user message ends it, and the next assistant-side item begins another.
    """
    names: dict[str, str] = {}
    in_response = False
    for entry in rollout:
        payload = _payload(entry)
        if entry.get("type") != "response_item":
            continue
        item = payload.get("type")
        assistant_side = _assistant_side(payload)
        if assistant_side and not in_response:
            tools.response()
        in_response = assistant_side
        if item in _CALL_ITEMS:
            name = _CALL_ITEMS[item] or str(payload.get("name"))
            metrics.tool_calls += 1
            metrics.tool_calls_by_name[name] = metrics.tool_calls_by_name.get(name, 0) + 1
            call_id = payload.get("call_id") if isinstance(payload.get("call_id"), str) else None
            if call_id is not None:
                names[call_id] = name
            command = _shell_command(name, payload)
            if command is not None:
                metrics.bash_commands.append(command[0])
                tools.shell(call_id, *command)
            elif item not in _PROVIDER_CALLS:
                tools.call(call_id)
        elif item in _OUTPUT_ITEMS:
            call_id = str(payload.get("call_id"))
            failed = call_id in names and _tool_failed(names[call_id], payload.get("output"))
            metrics.tool_errors += failed
            tools.result(call_id, _output_text(payload.get("output")), failed)


def _fold_stream_usage(metrics: Metrics, stream: list[dict[str, Any]]) -> None:
    """Tokens from the stream's `turn.completed` totals, for a run without usage in a rollout."""
    totals = [
        e["usage"] for e in stream if e.get("type") == "turn.completed" and isinstance(e.get("usage"), dict)
    ]
    for usage in totals:
        _add_usage(metrics, usage)
    # Each model response leaves at least one item (a message or a tool call): a lower bound.
    metrics.assistant_messages = sum(
        1
        for e in stream
        if e.get("type") == "item.completed"
        and (e.get("item") or {}).get("type")
        in ("agent_message", "command_execution", "file_change", "mcp_tool_call", "web_search")
    )
    if totals:
        metrics.cost_usd, metrics.cost_source = price([(metrics.model, None, u) for u in totals])


def _fold_stream_tools(metrics: Metrics, stream: list[dict[str, Any]], tools: ToolLog) -> None:
    """Tool calls from the stream's completed items, for a run without a rollout."""
    for event in stream:
        item = event.get("item") if event.get("type") == "item.completed" else None
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        call_id = item.get("id") if isinstance(item.get("id"), str) else None
        if kind == "command_execution":
            name, failed = "exec_command", not isinstance(item.get("exit_code"), int) or item["exit_code"] < 0
            command = _unwrap_login_shell(str(item.get("command", "")))
            metrics.bash_commands.append(command)
            tools.shell(call_id, command)
        elif kind == "file_change":
            name, failed = "apply_patch", item.get("status") == "failed"
        elif kind == "mcp_tool_call":
            name, failed = str(item.get("tool")), item.get("status") == "failed"
        elif kind == "web_search":
            name, failed = "web_search", False
        else:
            continue
        tools.result(call_id, str(item.get("aggregated_output") or ""), failed)
        metrics.tool_calls += 1
        metrics.tool_calls_by_name[name] = metrics.tool_calls_by_name.get(name, 0) + 1
        metrics.tool_errors += failed


def pending_tool_call(session_path: Path | None, stdout_path: Path | None) -> bool:
    """Whether the last response's tool calls had not all got their output item: from the rollout,
    else (no rollout) from the stream (CodexHarness.tool_pending)."""
    rollout = read_jsonl(session_path)
    if rollout:
        tools = ToolLog()
        _fold_rollout_tools(Metrics(), rollout, tools)
        return tools.pending
    return _stream_pending(read_jsonl(stdout_path))


def _stream_pending(stream: list[dict[str, Any]]) -> bool:
    """Whether a command, patch or MCP call the stream shows started had not completed when it
    ended (since the last turn began or ended, or an agent message or reasoning completed)."""
    tools = ToolLog()
    for event in stream:
        item = event.get("item") if isinstance(event.get("item"), dict) else {}
        kind = item.get("type")
        if event.get("type") in ("turn.started", "turn.completed", "turn.failed") or (
            event.get("type") == "item.completed" and kind in ("agent_message", "reasoning")
        ):
            tools.response()
        elif kind in _STREAM_TOOL_ITEMS and isinstance(item.get("id"), str):
            if event.get("type") == "item.started":
                tools.call(item["id"])
            elif event.get("type") == "item.completed":
                tools.result(item["id"], "", item.get("status") == "failed")
    return tools.pending


def _fold_outcomes(metrics: Metrics, rollout: list[dict[str, Any]], stream: list[dict[str, Any]]) -> None:
    """Stop reasons, error messages, transport failures and the final answer."""
    last_text: str | None = None
    for event in stream:
        kind = event.get("type")
        if kind == "item.completed" and isinstance(event.get("item"), dict):
            item = event["item"]
            if item.get("type") == "agent_message":
                last_text = str(item.get("text", ""))
            elif item.get("type") == "error":
                metrics.error_messages.append(str(item.get("message", "")))
        elif kind == "turn.started":
            last_text = None
        elif kind == "turn.completed":
            metrics.stop_reasons.append("completed")
            metrics.final_text = last_text
        elif kind == "error":
            metrics.error_messages.append(str(event.get("message", "")))
            metrics.transport_failures += 1
        elif kind == "turn.failed":
            metrics.stop_reasons.append("error")
            message = str((event.get("error") or {}).get("message", ""))
            # Codex announces the failure that ends a turn twice: `error`, then `turn.failed`.
            if not (metrics.error_messages and metrics.error_messages[-1] == message):
                metrics.error_messages.append(message)
                metrics.transport_failures += 1
    if any("type" in event for event in stream):
        return
    # No event stream of this format (Codex 0.40's is `{id, msg}` events): the rollout's turn ends
    # say as much; without one (0.40 records none), its last agent message is the answer.
    answer: str | None = None
    for entry in rollout:
        payload = _payload(entry)
        if entry.get("type") != "event_msg":
            continue
        if payload.get("type") == "agent_message":
            answer = as_str(payload.get("message"))
        elif payload.get("type") == "task_complete":
            error = payload.get("error") if isinstance(payload.get("error"), dict) else None
            metrics.stop_reasons.append("error" if error else "completed")
            if error:
                metrics.error_messages.append(str(error.get("message", "")))
                metrics.transport_failures += 1
            else:
                metrics.final_text = payload.get("last_agent_message")
        elif payload.get("type") == "turn_aborted":
            metrics.stop_reasons.append("aborted")
    if not metrics.stop_reasons:
        metrics.final_text = answer


def signature(rollout: list[dict[str, Any]], stream: list[dict[str, Any]]) -> str | None:
    """`codex_<info>` from the `codex_error_info` of the turn the run ended on; `codex_turn_failed`
    for a failed turn without one; None when that turn did not fail (an earlier failure was
    recovered from) or failed by the agent's own doing. The rollout's turn ends decide; the
    stream's stand in for a run without any."""
    ends = [
        _payload(e)
        for e in rollout
        if e.get("type") == "event_msg" and _payload(e).get("type") == "task_complete"
    ]
    if ends:
        error = ends[-1].get("error")
        if not isinstance(error, dict):
            return None
        info = error.get("codex_error_info")
        name = next(iter(info), None) if isinstance(info, dict) else info
        if not isinstance(name, str) or not name:
            return TURN_FAILED_SIGNATURE
        return None if name in AGENT_FAILURES else f"codex_{name}"
    turns = [e for e in stream if e.get("type") in ("turn.completed", "turn.failed")]
    if turns and turns[-1].get("type") == "turn.failed":
        return TURN_FAILED_SIGNATURE
    return None


def price(responses: list[tuple[str | None, str | None, dict[str, Any]]]) -> tuple[float | None, str]:
    """The cost of model responses `(model, ISO timestamp, Codex usage)` by genai-prices, and its source.

    genai-prices counts cached and cache-write tokens inside `input_tokens`, as Codex does.
    """
    total = 0.0
    for model, timestamp, usage in responses:
        if not model:
            return None, f"{COST_SOURCE}: no model recorded"
        try:
            calc = genai_prices.calc_price(
                genai_prices.Usage(
                    input_tokens=as_int(usage.get("input_tokens")),
                    cache_read_tokens=as_int(usage.get("cached_input_tokens")),
                    cache_write_tokens=as_int(usage.get("cache_write_input_tokens")),
                    output_tokens=as_int(usage.get("output_tokens")),
                ),
                model,
                provider_id=PRICE_PROVIDER,
                genai_request_timestamp=as_time(timestamp),
            )
        except LookupError:
            return None, f"{COST_SOURCE}: model {model!r} not priced"
        total += float(calc.total_price)
    return round_cost(total), COST_SOURCE


def _add_usage(metrics: Metrics, usage: dict[str, Any]) -> None:
    """Add one Codex usage object."""
    metrics.add_tokens(usage_of(usage))


def usage_of(usage: dict[str, Any]) -> ModelUsage:
    """One Codex usage object in the rig's terms: input_tokens are the uncached ones."""
    everything = as_int(usage.get("input_tokens"))
    cached, written = as_int(usage.get("cached_input_tokens")), as_int(usage.get("cache_write_input_tokens"))
    output = as_int(usage.get("output_tokens"))
    return ModelUsage(
        input_tokens=everything - cached - written,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        output_tokens=output,
        reasoning_tokens=as_int(usage.get("reasoning_output_tokens")),
        total_tokens=as_int(usage.get("total_tokens")) or everything + output,
    )


class LiveRollout:
    """The usage of each model response of one rollout as it grows, entry by entry: the reader of
    CodexHarness.session_usage (rig.confine.session_usage), counting as `_fold_rollout` does.

    Each `token_usage_record` (0.171) is a response, priced for the model of the `turn_context`
    before it; until the rollout has one, each `token_count` whose totals changed (0.40 to 0.125)
    is, by its `last_token_usage` (one without it counts nothing). Both are keyed by the
    response's place: a record that follows its response's `token_count` replaces it, and once
    records come, counts are no longer read (the parser then reads only the records).
    """

    def __init__(self) -> None:
        self.model: str | None = None
        self.records = 0
        self.counts = 0
        self.last_total: Any = None

    def __call__(self, entry: dict[str, Any]) -> list[LiveUsage]:
        """The usage of the response one rollout entry records, if it records one."""
        kind, payload = entry.get("type"), _payload(entry)
        if kind == "turn_context" and isinstance(payload.get("model"), str):
            self.model = payload["model"]
        elif kind == "token_usage_record" and isinstance(payload.get("usage"), dict):
            self.records += 1
            return [LiveUsage(usage_of(payload["usage"]), str(self.records - 1), self.model)]
        elif kind == "event_msg" and payload.get("type") == "token_count" and not self.records:
            info = payload.get("info")
            if not isinstance(info, dict) or not isinstance(info.get("total_token_usage"), dict):
                return []
            if info["total_token_usage"] == self.last_total:
                return []
            self.last_total = info["total_token_usage"]
            self.counts += 1
            last = info.get("last_token_usage")
            if isinstance(last, dict):
                return [LiveUsage(usage_of(last), str(self.counts - 1), self.model)]
        return []


def _unread_usage(kind: Any, payload: dict[str, Any]) -> bool:
    """Whether an entry or event the parser does not read carries token usage."""
    # A `compacted` item's usage repeats the summarization response's token_usage_record.
    if kind in ("token_usage_record", "turn.completed", "compacted") or payload.get("type") == "token_count":
        return False
    return carries_usage(payload)


def _entry_kind(kind: Any, payload: dict[str, Any]) -> str:
    return f"{kind}/{payload['type']}" if isinstance(payload.get("type"), str) else str(kind)


def _shell_command(name: str, payload: dict[str, Any]) -> tuple[str, str | None] | None:
    """(command, workdir) of a call that runs a shell command, else None."""
    if name not in _SHELL_TOOLS:
        return None
    arguments: Any = payload.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if name == "local_shell":
        arguments = payload.get("action")
    if not isinstance(arguments, dict):
        return None
    workdir = arguments.get("workdir") or arguments.get("working_directory")
    workdir = workdir if isinstance(workdir, str) else None
    command = arguments.get("cmd", arguments.get("command"))
    if isinstance(command, str):
        return command, workdir
    if isinstance(command, list) and all(isinstance(a, str) for a in command) and command:
        if (
            len(command) == 3
            and posixpath.basename(command[0]) in ("bash", "sh", "zsh")
            and command[1] in ("-c", "-lc")
        ):
            return command[2], workdir
        return shlex.join(command), workdir
    return None


def _tool_failed(name: str, output: Any) -> bool:
    """Whether a tool's output says the tool did not run (not: ran and its command failed)."""
    if isinstance(output, dict) and output.get("success") is False:
        return True
    text = _output_text(output)
    if name in ("exec_command", "write_stdin"):
        return _PROCESS_REPORT.search(text.split("\nOutput:\n", 1)[0]) is None
    if name == "apply_patch":
        # Codex 0.171: "Exit code: N\n..."; 0.125 and older: {"output": ..., "metadata": {"exit_code": N}}.
        status = _json_metadata(text).get("exit_code")
        if isinstance(status, int) and not isinstance(status, bool):
            return status != 0
        return not text.startswith("Exit code: 0")
    return text.startswith(
        ("failed to parse function arguments", "unsupported call", "unsupported custom tool call")
    )


def _json_metadata(text: str) -> dict[str, Any]:
    """The `metadata` object of an output that is a JSON object (older Codex versions), else {}."""
    if not text.startswith("{"):
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    metadata = value.get("metadata") if isinstance(value, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def _unwrap_login_shell(command: str) -> str:
    """The command inside Codex's `/bin/bash -lc '...'` wrapper (the stream shows only the wrapped form)."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    if len(argv) == 3 and posixpath.basename(argv[0]) in ("bash", "sh", "zsh") and argv[1] in ("-c", "-lc"):
        return argv[2]
    return command


def _payload(entry: dict[str, Any]) -> dict[str, Any]:
    payload = entry.get("payload")
    return payload if isinstance(payload, dict) else {}


def _output_text(output: Any) -> str:
    """The text of a call's output item: a string, `{content|output: ...}`, or a list of text parts."""
    if isinstance(output, dict):
        output = output.get("content", output.get("output", ""))
    if isinstance(output, list):
        return "".join(str(part.get("text", "")) for part in output if isinstance(part, dict))
    return str(output or "")

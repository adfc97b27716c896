"""What every adapter's parser shares: tolerant JSONL reading, tool calls and their results, and the
behaviour derived from reads and commands."""

import json
import math
import posixpath
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rig.confine.run_budget import LiveUsage
from rig.schema import Metrics, ModelUsage, Transcript, TranscriptStep, TranscriptToolCall
from rig.session import shell

# The diagnostic Pi (pi-ai) adds to a message whose transport failed before it completed.
PI_TRANSPORT_FAILURE = "provider_transport_failure"


def unreadable_lines(path: Path | None) -> list[str]:
    """A gap for a transcript when lines of a JSONL file do not parse as JSON objects (a torn last
    line, a corrupted file), which `read_jsonl` skips; none for a missing file."""
    if path is None or not path.is_file():
        return []
    bad = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            bad += line.strip() != "" and not isinstance(json.loads(line), dict)
        except json.JSONDecodeError:
            bad += 1
    return [f"{path.name}: {bad} line(s) are not JSON objects and were skipped"] if bad else []


def read_jsonl(path: Path | None) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, skipping lines that do not parse (a torn last line)."""
    if path is None or not path.is_file():
        return []
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def carries_usage(entry: dict[str, Any]) -> bool:
    """Whether a log entry carries token usage: a key naming usage (or `tokens`) at its top level
    or one level down. Parsers ask it of the entries they do not read, so that usage a new
    version moved elsewhere makes the metrics incomplete instead of silently zero."""
    levels = [entry, *(v for v in entry.values() if isinstance(v, dict))]
    return any("usage" in str(key).lower() or key == "tokens" for level in levels for key in level)


NO_USAGE_GAP = "no token usage recorded although the model responded"


def usage_gaps(metrics: Metrics, cut: int = 0, unread: Iterable[str] = ()) -> None:
    """Mark `metrics` incomplete where the usage it holds is short: `cut` responses ended without
    their usage (a stream cut before its last chunk: the provider may still bill them), entries of
    the kinds `unread` carry usage the parser does not read, or the model responded (tool calls,
    an answer) and no token was read at all."""
    if cut:
        metrics.incomplete(f"{cut} responses without usage (their stream was cut before its end)")
    for kind in sorted(set(unread)):
        metrics.incomplete(f"usage in entries of type {kind!r}, not read")
    if metrics.total_tokens == 0 and (metrics.tool_calls or metrics.final_text):
        metrics.incomplete(NO_USAGE_GAP)


NO_MODEL_GAP = "no model name recorded although the model responded: tokens and cost not split by model"


def fill_per_model(metrics: Metrics) -> Metrics:
    """`metrics` with `per_model` filled where the parser left it empty: every adapter's
    parse_session ends here, so that a run whose model responded never has an empty `per_model`
    without a gap. A parser that tells models apart fills `per_model` itself and is left as it is;
    otherwise the run's totals (tokens and cost) are one entry under the model the session names,
    and a run naming none records the gap (the totals stay exact, so the run still counts)."""
    usage = ModelUsage(
        input_tokens=metrics.input_tokens,
        output_tokens=metrics.output_tokens,
        cache_read_tokens=metrics.cache_read_tokens,
        cache_write_tokens=metrics.cache_write_tokens,
        reasoning_tokens=metrics.reasoning_tokens,
        total_tokens=metrics.total_tokens,
        cost_usd=metrics.cost_usd,
    )
    tokens = usage.model_dump(exclude={"cost_usd"}).values()
    if metrics.per_model or not (metrics.assistant_messages or any(tokens)):
        return metrics
    if metrics.model is None:
        metrics.unrecorded(NO_MODEL_GAP)
    else:
        metrics.per_model[metrics.model] = usage
    return metrics


def unread_usage(entries: Iterable[dict[str, Any]], read: frozenset[str]) -> list[str]:
    """The `type` of each entry whose type is not in `read` and which carries usage."""
    return [str(e.get("type")) for e in entries if e.get("type") not in read and carries_usage(e)]


def record_compactions(
    metrics: Metrics, compactions: list[tuple[int | None, int | None]], spent: int | None = None
) -> None:
    """Set the compaction fields of `metrics` from what a session records of each compaction: the
    context's tokens before and after it (None where it records none). `spent` is the tokens of the
    summarization requests where the session records them apart, else None (0 without compactions)."""
    metrics.compactions = len(compactions)
    metrics.compaction_tokens_before = _known_sum([before for before, _ in compactions])
    metrics.compaction_tokens_after = _known_sum([after for _, after in compactions])
    metrics.compaction_tokens = spent if compactions else 0


def _known_sum(values: list[int | None]) -> int | None:
    """The sum of `values`, None if any is unknown (0 for none at all)."""
    return None if None in values else sum(v for v in values if v is not None)


def as_int(value: Any) -> int:
    """An integer count from a log field; anything else (None, bool, text) counts as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def relative_path(path: str, cwd: str | None) -> str:
    """A read path relative to the workspace: `./` and the workspace's absolute prefix removed."""
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        path = path[len(cwd.rstrip("/")) + 1 :]
    while path.startswith("./"):
        path = path[2:]
    return path


class ToolLog:
    """The tool calls of one session in the order issued, with their results as they come.

    Parsers tell it when a model response begins, which calls it issues and which results come
    back; it answers the two questions every harness asks of that sequence the same way:

    - `read_paths`: the files the agent read. A read tool's call counts unless its result is an
      error (the file did not exist, was a directory...). A shell call counts the files its
      command prints (`shell.read_paths`) except those its output reports as unreadable (`cat: x:
      No such file or directory`). A call without a result (the run ended first) keeps its paths:
      nothing shows that they failed.
    - `pending`: whether a call the latest model response issued has no result yet: a tool still
      running when the run ended. A call without a result that a new response followed is not
      (the harness gave up on it and went back to the model).
    """

    def __init__(self) -> None:
        self._open: set[str] = set()
        self._unnamed = 0
        # (call id, "read" or "shell", the path or command, the directory a shell call ran in)
        self._reads: list[tuple[str, str, str, str | None]] = []
        self._results: dict[str, tuple[str, bool]] = {}

    def response(self) -> None:
        """A model response began: calls issued before it are no longer running."""
        self._open.clear()

    def call(self, call_id: str | None) -> str:
        """A tool call was issued; its id (one is made up for a call that has none)."""
        if not call_id:
            # A call without an id can never be matched with a result: it stays open.
            self._unnamed += 1
            call_id = f"#unnamed-{self._unnamed}"
        self._open.add(call_id)
        return call_id

    def read(self, call_id: str | None, path: str) -> None:
        """A read tool's call for `path`."""
        self._reads.append((self.call(call_id), "read", path, None))

    def shell(self, call_id: str | None, command: str, workdir: str | None = None) -> None:
        """A shell call running `command` (in `workdir`, when not the session's directory)."""
        self._reads.append((self.call(call_id), "shell", command, workdir))

    def result(self, call_id: str | None, text: str, is_error: bool) -> None:
        """The result of a call: what it returned to the model, and whether the tool failed."""
        if call_id:
            self._open.discard(call_id)
            self._results[call_id] = (text, is_error)

    @property
    def pending(self) -> bool:
        """Whether a call of the latest response is still without a result (see the class docstring)."""
        return bool(self._open)

    def read_attempts(self) -> list[str]:
        """Every path a read tool was called with, whatever its result: what the audit checks."""
        return [target for _call, kind, target, _workdir in self._reads if kind == "read"]

    def read_paths(self) -> list[str]:
        """The files read, in call order (see the class docstring); shell paths are resolved
        against the command's `cd`s and the call's workdir, relative to the session's directory."""
        paths: list[str] = []
        for call_id, kind, target, workdir in self._reads:
            result = self._results.get(call_id)
            if kind == "read":
                if not (result and result[1]):
                    paths.append(target)
                continue
            output = result[0] if result else None
            paths += [_join_workdir(workdir, p) for p in shell.read_paths(target, output)]
        return paths


def _join_workdir(workdir: str | None, path: str) -> str:
    """A read path as seen from the session's cwd when the call ran in another `workdir`."""
    if workdir and not path.startswith("/"):
        return posixpath.normpath(posixpath.join(workdir, path))
    return path


def result_text(content: Any) -> str:
    """The text of a tool result's content: a string, or a list of text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def fold_pi_message(metrics: Metrics, message: dict[str, Any], tools: ToolLog) -> float | None:
    """Fold one message of a Pi-format session into `metrics` and `tools`; its cost, if any.

    Pi writes this format, and the scripted agent imitates it so that the same parsing is tested.
    An assistant message is one model response; a `toolResult` message is the result of one call.
    """
    role = message.get("role")
    if role == "toolResult":
        is_error = message.get("isError") is True
        metrics.tool_errors += is_error
        tools.result(as_str(message.get("toolCallId")), result_text(message.get("content")), is_error)
        return None
    if role != "assistant":
        return None
    tools.response()
    metrics.assistant_messages += 1
    stop_reason = message.get("stopReason")
    if isinstance(stop_reason, str):
        metrics.stop_reasons.append(stop_reason)
    if message.get("errorMessage"):
        metrics.error_messages.append(str(message["errorMessage"]))
    metrics.transport_failures += pi_failed_attempts(message)
    content = message.get("content") if isinstance(message.get("content"), list) else []
    texts = []
    for item in content:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "text":
            texts.append(str(item.get("text", "")))
        elif item.get("type") == "toolCall":
            name = str(item.get("name"))
            arguments = item.get("arguments") if isinstance(item.get("arguments"), dict) else {}
            metrics.tool_calls += 1
            metrics.tool_calls_by_name[name] = metrics.tool_calls_by_name.get(name, 0) + 1
            call_id = as_str(item.get("id"))
            if name == "bash" and isinstance(arguments.get("command"), str):
                metrics.bash_commands.append(arguments["command"])
                tools.shell(call_id, arguments["command"])
            elif name == "read" and isinstance(arguments.get("path"), str):
                tools.read(call_id, arguments["path"])
            else:
                tools.call(call_id)
    if stop_reason == "stop":
        metrics.final_text = "\n".join(texts)
    usage = pi_usage(message.get("usage") if isinstance(message.get("usage"), dict) else {})
    metrics.add_tokens(usage)
    return usage.cost_usd


def pi_usage(usage: dict[str, Any]) -> ModelUsage:
    """The tokens and cost (None where it records none) of one Pi assistant message's `usage`."""
    cost = usage.get("cost")
    total = cost.get("total") if isinstance(cost, dict) else None
    return ModelUsage(
        input_tokens=as_int(usage.get("input")),
        output_tokens=as_int(usage.get("output")),
        cache_read_tokens=as_int(usage.get("cacheRead")),
        cache_write_tokens=as_int(usage.get("cacheWrite")),
        # Pi 0.73.1 keeps no reasoning count (OpenAI's output already includes it); read it if a
        # later version adds one.
        reasoning_tokens=as_int(usage.get("reasoning")),
        total_tokens=as_int(usage.get("totalTokens")),
        cost_usd=float(total) if isinstance(total, int | float) and not isinstance(total, bool) else None,
    )


def pi_live_usage(event: dict[str, Any]) -> LiveUsage | None:
    """The usage of one assistant response as Pi streams it (`--mode json`: its `message_end`; the
    scripted agent's `message`), with Pi's own cost: the live usage reader of rig.confine.run_budget."""
    message = event.get("message")
    if event.get("type") not in ("message_end", "message") or not isinstance(message, dict):
        return None
    usage = message.get("usage")
    if message.get("role") != "assistant" or not isinstance(usage, dict):
        return None
    return LiveUsage(pi_usage(usage), model=as_str(message.get("model")))


def pi_failed_attempts(message: dict[str, Any]) -> int:
    """Failed provider attempts behind one Pi assistant message.

    Pi keeps an errored request as a message with stopReason "error" (a retry adds a message of
    its own), and notes a transport it gave up for another as a `provider_transport_failure`
    diagnostic on the message that then completed (a WebSocket failing, SSE taking over). A
    diagnostic without a fallback is the failure the message's own error already stands for.
    """
    diagnostics = message.get("diagnostics") if isinstance(message.get("diagnostics"), list) else []
    failures = [d for d in diagnostics if isinstance(d, dict) and d.get("type") == PI_TRANSPORT_FAILURE]
    recovered = sum(1 for d in failures if _fallback(d))
    return recovered + max(len(failures) - recovered, int(message.get("stopReason") == "error"))


def _fallback(diagnostic: dict[str, Any]) -> bool:
    """Whether a transport-failure diagnostic names the transport Pi fell back to."""
    details = diagnostic.get("details") if isinstance(diagnostic.get("details"), dict) else {}
    return bool(diagnostic.get("fallbackTransport") or details.get("fallbackTransport"))


def as_str(value: Any) -> str | None:
    """`value` if it is a non-empty string (a field of a session file may be anything), else None."""
    return value if isinstance(value, str) and value else None


def as_time(value: Any) -> datetime | None:
    """An ISO 8601 timestamp of a session file (`Z` for UTC allowed), else None."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def iso_timestamp(value: Any) -> str | None:
    """A session file's timestamp as ISO 8601: an ISO string as it is, milliseconds since the epoch
    (Pi, OpenCode) converted; else None."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value / 1000, UTC).isoformat().replace("+00:00", "Z")
        except (OverflowError, OSError, ValueError):
            return None
    return value if as_time(value) is not None else None


def place_by_time(steps: list[TranscriptStep], notes: list[TranscriptStep]) -> list[TranscriptStep]:
    """`steps` with `notes` (system steps from another file: retries, errors) among them, each
    before the first step that began after it; a note without a timestamp, or after every step, last.
    Steps without a timestamp keep their place."""
    pending = sorted(notes, key=lambda note: _epoch(note.timestamp))
    placed: list[TranscriptStep] = []
    for step in steps:
        began = _epoch(step.timestamp)
        while pending and began < math.inf and _epoch(pending[0].timestamp) < began:
            placed.append(pending.pop(0))
        placed.append(step)
    return placed + pending


def _epoch(timestamp: str | None) -> float:
    """Seconds since the epoch of an ISO timestamp (naive ones taken as UTC); infinity for none."""
    moment = as_time(timestamp)
    if moment is None:
        return math.inf
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def derive_behaviour(
    metrics: Metrics,
    read_order: list[str],
    cwd: str | None,
    skill_invoked: bool = False,
    attempted: list[str] | None = None,
) -> None:
    """Fill the pack-free behaviour fields from the reads and shell commands a parser collected.

    Read paths are made relative to the workspace and deduplicated in order; SKILL.md reads,
    searches and pytest runs are judged by `rig.session.shell`, the same for every harness. What
    only the task's pack decides (docs read, gate and test runs) is `rig.session.shell.judge`'s.
    """
    seen: set[str] = set()
    for raw in read_order:
        path = relative_path(raw, cwd)
        if path and path not in seen:
            seen.add(path)
            metrics.read_paths.append(path)
    metrics.read_attempts = list(dict.fromkeys(attempted or []))
    metrics.read_skill = skill_invoked or any(shell.is_skill(p) for p in metrics.read_paths)
    metrics.bash_search_commands = [c for c in metrics.bash_commands if shell.is_search(c)]
    metrics.ran_pytest = any(shell.runs_pytest(c) for c in metrics.bash_commands)


def optional_int(value: Any) -> int | None:
    """A count a session file records for one turn; None where it records none (or not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def pi_transcript(harness: str, messages: Iterable[dict[str, Any]], header: dict[str, Any]) -> Transcript:
    """The steps of a Pi-format conversation (Pi's own, and the scripted agent's imitation).

    `header` is the session's `session` entry (its prompt, if it holds one, becomes the first
    step). A toolResult message fills the output of the call it answers, whichever turn made it; an
    `error` message (a provider error the scripted agent logs) becomes a system step.
    """
    transcript = Transcript(
        harness=harness, session_id=as_str(header.get("id")), model=as_str(header.get("model"))
    )
    prompt = as_str(header.get("prompt"))
    if prompt:
        transcript.steps.append(TranscriptStep(source="user", text=prompt))
    calls: dict[str, TranscriptToolCall] = {}
    for message in messages:
        role = message.get("role")
        if role == "user":
            transcript.steps.append(TranscriptStep(source="user", text=result_text(message.get("content"))))
        elif role == "toolResult":
            call = calls.get(as_str(message.get("toolCallId")) or "")
            if call is None:
                transcript.gaps.append(f"a tool result for an unknown call {message.get('toolCallId')!r}")
                continue
            call.output = result_text(message.get("content"))
            call.is_error = message.get("isError") is True
        elif role == "assistant":
            transcript.steps.append(_pi_turn(message, calls))
        elif role == "error":
            transcript.steps.append(
                TranscriptStep(source="system", text=f"[provider error] {message['content']}")
            )
    transcript.model = transcript.model or next((s.model for s in transcript.steps if s.model), None)
    return transcript


def _pi_turn(message: dict[str, Any], calls: dict[str, TranscriptToolCall]) -> TranscriptStep:
    texts, thoughts, step_calls = [], [], []
    for item in message.get("content") if isinstance(message.get("content"), list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "text":
            texts.append(str(item.get("text", "")))
        elif item.get("type") == "thinking":
            thoughts.append(str(item.get("thinking", "")))
        elif item.get("type") == "toolCall":
            arguments = item.get("arguments")
            call = TranscriptToolCall(
                id=as_str(item.get("id")),
                name=str(item.get("name")),
                arguments=arguments if isinstance(arguments, dict | str) else {},
            )
            step_calls.append(call)
            if call.id:
                calls[call.id] = call
    if message.get("errorMessage"):
        texts.append(f"[error] {message['errorMessage']}")
    usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
    cost = usage.get("cost")
    total = cost.get("total") if isinstance(cost, dict) else None
    model = message.get("model")
    return TranscriptStep(
        source="agent",
        text="\n".join(texts),
        reasoning="\n".join(thoughts) or None,
        model=f"{message.get('provider')}/{model}" if message.get("provider") and model else as_str(model),
        tool_calls=step_calls,
        input_tokens=optional_int(usage.get("input")),
        output_tokens=optional_int(usage.get("output")),
        cache_read_tokens=optional_int(usage.get("cacheRead")),
        cache_write_tokens=optional_int(usage.get("cacheWrite")),
        reasoning_tokens=optional_int(usage.get("reasoning")),
        cost_usd=float(total) if isinstance(total, int | float) and not isinstance(total, bool) else None,
        timestamp=iso_timestamp(message.get("timestamp")),
    )

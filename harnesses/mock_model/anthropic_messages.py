"""Anthropic Messages, as Claude Code consumes it (`POST /v1/messages?beta=true`, streamed).

A tool step becomes a `tool_use` block whose name and input come from the harness's tool map (a
JSON object: Anthropic has no free-form tools); `final` becomes a text block. The map gets the
working directory the request states ("Primary working directory: ..."), or None: Claude Code
2.1.197 states it in the system prompt, 2.1.332 in a `role: "system"` message of the conversation.

Usage maps one to one onto Claude Code's own accounting, so its `result.usage` (summed over the
responses) equals the sum of the `Usage` served:

| Usage        | Anthropic field                                               |
|--------------|---------------------------------------------------------------|
| input        | `input_tokens` (uncached input, as on the real API)           |
| cache_read   | `cache_read_input_tokens`                                     |
| cache_write  | `cache_creation_input_tokens`                                 |
| output       | `output_tokens` (in `message_delta`; `message_start` says 0)  |
| reasoning    | `output_tokens_details.thinking_tokens` (in `message_delta`), |
|              | a part of output_tokens, as Anthropic counts thinking         |

Claude Code 2.1.332 passes `thinking_tokens` on to its transcript and `result.usage`; 2.1.197 drops it.

Requests that are not the main conversation (no tools and no working directory in the request:
a title, summary or quota check; or a subagent's cache warmup, whose one message ends with the
text `Warmup`, sent by Claude Code 2.0 to early 2.1) are side requests (`is_side_request`): the
server answers them with a plain text and zero usage and records them as such; their turn is
`SIDE_TURN`.
"""

import json
import re

from harnesses.mock_model.policy import Step
from harnesses.mock_model.server import Usage, sse
from harnesses.mock_model.tools import ToolCall, ToolMap, json_arguments, offered

# The turn of a side request: no turn of the conversation, as the ledger shows.
SIDE_TURN = 1_000_000
# The last text of the one message of Claude Code's subagent warmups (2.0 to early 2.1).
WARMUP_TEXT = "Warmup"
_CWD_LINE = re.compile(r"(?:Primary )?[Ww]orking directory:\s*(\S+)")
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class AnthropicMessages:
    """`POST /v1/messages`: SSE for `stream: true`, one JSON message otherwise."""

    name = "anthropic-messages"
    path = "/v1/messages"

    def __init__(self, tools: ToolMap) -> None:
        self.tools = tools

    def turn(self, request: dict) -> int:
        """Assistant messages already in the history; SIDE_TURN for a side request."""
        if self.is_side_request(request):
            return SIDE_TURN
        messages = request.get("messages") or []
        return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")

    def tool_call(self, step: Step, request: dict) -> ToolCall | None:
        """The tool map's call for a step, given the request's working directory; None for final."""
        return self.tools.call(step, _cwd(request))

    def content_type(self, request: dict) -> str:
        """The media type of the answer: the SDK parses a non-streamed answer only as JSON."""
        return "text/event-stream" if request.get("stream") else "application/json"

    def events(self, step: Step, usage: Usage, request: dict, response_id: str) -> list[bytes]:
        """message_start, a text or tool_use block, message_delta (stop reason, output), message_stop.

        A request without `stream: true` (Claude Code's fallback after a cut stream) gets the
        whole message as one JSON body instead.
        """
        model = request.get("model") or "mock-model"
        call = self.tool_call(step, request)
        if call is None:
            block: dict = {"type": "text", "text": step.text}
            stop_reason = "end_turn"
        else:
            tool_input = json_arguments(call, self.name)
            block = {"type": "tool_use", "id": f"toolu_{response_id}", "name": call.name, "input": tool_input}
            stop_reason = "tool_use"
        start_usage = {
            "input_tokens": usage.input,
            "cache_creation_input_tokens": usage.cache_write,
            "cache_read_input_tokens": usage.cache_read,
        }
        message = {
            "id": f"msg_{response_id}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**start_usage, "output_tokens": 0},
        }
        if not request.get("stream"):
            final = {
                **message,
                "content": [block],
                "stop_reason": stop_reason,
                "usage": {**start_usage, **_output_usage(usage)},
            }
            return [json.dumps(final).encode()]
        out = [_event("message_start", {"message": message})]
        if call is None:
            out.append(
                _event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
            )
            delta = {"type": "text_delta", "text": step.text}
        else:
            out.append(_event("content_block_start", {"index": 0, "content_block": {**block, "input": {}}}))
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out.append(_event("content_block_delta", {"index": 0, "delta": delta}))
        out.append(_event("content_block_stop", {"index": 0}))
        out.append(
            _event(
                "message_delta",
                {
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": _output_usage(usage),
                },
            )
        )
        out.append(_event("message_stop", {}))
        return out

    def error_body(self, status: int) -> dict:
        """Anthropic's error envelope: `{"type": "error", "error": {"type", "message"}}`."""
        kind = _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": f"mock provider error (HTTP {status})"}}

    def is_side_request(self, request: dict) -> bool:
        """Whether a request is outside the agent's conversation: no tools and no working directory.

        Claude Code's agent loop always states its working directory (in the system prompt or a
        system message), even with every tool disabled; helper calls (titles, summaries, quota
        checks) do not. A subagent's warmup (one message ending in `Warmup`) has tools and a
        working directory but is no turn of the conversation either.
        """
        messages = request.get("messages") or []
        if len(messages) == 1 and isinstance(messages[0], dict):
            texts = _texts(messages[0].get("content"))
            if texts and texts[-1].strip() == WARMUP_TEXT:
                return True
        return not request.get("tools") and _cwd(request) is None

    def thinking(self, request: dict) -> str | None:
        """`output_config.effort` (Claude Code's `--effort`), else what `thinking` asks: `off` when
        disabled, a budget in tokens, or its type (`adaptive`)."""
        effort = (request.get("output_config") or {}).get("effort")
        if effort is not None:
            return str(effort)
        thinking = request.get("thinking")
        if not isinstance(thinking, dict):
            return None
        if thinking.get("type") == "disabled":
            return "off"
        if thinking.get("budget_tokens") is not None:
            return f"{thinking['budget_tokens']} tokens"
        return str(thinking.get("type")) if thinking.get("type") is not None else None

    def offered_tools(self, request: dict) -> list[str]:
        """Each tool's `name`."""
        return offered(request.get("tools"), lambda tool: tool.get("name"))


def _output_usage(usage: Usage) -> dict:
    """The output part of a response's final usage: output tokens, thinking among them."""
    return {"output_tokens": usage.output, "output_tokens_details": {"thinking_tokens": usage.reasoning}}


def _event(kind: str, data: dict) -> bytes:
    return sse({"type": kind, **data}, event=kind)


def _cwd(request: dict) -> str | None:
    """The working directory the system prompt, or a system message of the conversation, states."""
    texts = _texts(request.get("system"))
    for message in request.get("messages") or []:
        # Claude Code 2.1.332 moved its environment section out of the system prompt into a
        # system-role message; a user message may quote anything, so only system messages count.
        if isinstance(message, dict) and message.get("role") == "system":
            texts += _texts(message.get("content"))
    for text in texts:
        match = _CWD_LINE.search(text)
        if match:
            return match.group(1)
    return None


def _texts(content: object) -> list[str]:
    """The texts of a system prompt or message content: a string, or a list of text blocks."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [str(b.get("text", "")) for b in content if isinstance(b, dict)]
    return []

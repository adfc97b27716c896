"""Anthropic Messages, as Claude Code consumes it (`POST /v1/messages?beta=true`, streamed).

A tool step becomes a `tool_use` block whose name and input come from the harness's tool map (a
JSON object: Anthropic has no free-form tools); `final` becomes a text block. The map gets the
working directory the system prompt states ("Primary working directory: ..."), or None.

Usage maps one to one onto Claude Code's own accounting, so its `result.usage` (summed over the
responses) equals the sum of the `Usage` served:

| Usage        | Anthropic field                                               |
|--------------|---------------------------------------------------------------|
| input        | `input_tokens` (uncached input, as on the real API)           |
| cache_read   | `cache_read_input_tokens`                                     |
| cache_write  | `cache_creation_input_tokens`                                 |
| output       | `output_tokens` (in `message_delta`; `message_start` says 0)  |
| reasoning    | not reported: Anthropic counts thinking inside output_tokens  |

Requests that are not the main conversation (no tools and no working directory in the system
prompt: a title, summary or quota check) are side requests (`is_side_request`): the server answers
them with a plain text and zero usage and records them as such; their turn is `SIDE_TURN`.
"""

import json
import re

from harnesses.mock_model.policy import Step
from harnesses.mock_model.server import Usage, sse
from harnesses.mock_model.tools import ToolCall, ToolMap, json_arguments

# The turn of a side request: no turn of the conversation, as the ledger shows.
SIDE_TURN = 1_000_000
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
        """The tool map's call for a step, given the system prompt's working directory; None for final."""
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
                "usage": {**start_usage, "output_tokens": usage.output},
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
                    "usage": {"output_tokens": usage.output},
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

        Claude Code's agent loop always states its working directory in the system prompt, even
        with every tool disabled; helper calls (titles, summaries, quota checks) do not.
        """
        return not request.get("tools") and _cwd(request) is None


def _event(kind: str, data: dict) -> bytes:
    return sse({"type": kind, **data}, event=kind)


def _cwd(request: dict) -> str | None:
    """The working directory the system prompt states, if any."""
    system = request.get("system")
    if isinstance(system, str):
        texts = [system]
    else:
        texts = [str(b.get("text", "")) for b in system or [] if isinstance(b, dict)]
    for text in texts:
        match = _CWD_LINE.search(text)
        if match:
            return match.group(1)
    return None

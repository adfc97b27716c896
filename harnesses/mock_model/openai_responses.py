"""OpenAI Responses, streamed, as Codex's `wire_api = "responses"` provider consumes it.

Codex sends its whole conversation in `input` on every request (`store: false`), so the number of
assistant-side items already there (function calls, custom tool calls, assistant messages) is the
number of model responses served so far: the server stays stateless and a retried request gets the
same step. A tool step becomes the harness's tool map's call: a `function_call` for JSON arguments,
a `custom_tool_call` for a free-form input (this protocol reads no working directory from a
request, so the map gets None); `final` is an assistant message.

Usage mapping (checked against Codex 0.171's `turn.completed` and rollout `token_usage_record`):
OpenAI counts cached and cache-write tokens inside `input_tokens` and reasoning tokens inside
`output_tokens`. The mock's `Usage.input` is the uncached input (the rig's `Metrics` convention), so

    input_tokens = input + cache_read + cache_write
    input_tokens_details = {cached_tokens: cache_read, cache_write_tokens: cache_write}
    output_tokens = output (reasoning included), output_tokens_details.reasoning_tokens = reasoning

Codex reports these as `input_tokens`, `cached_input_tokens`, `cache_write_input_tokens`,
`output_tokens` and `reasoning_output_tokens`; the adapter's uncached input is
`input_tokens - cached_input_tokens - cache_write_input_tokens`, which equals `Usage.input` exactly.
"""

import json

from harnesses.mock_model.policy import Step
from harnesses.mock_model.server import Usage, sse
from harnesses.mock_model.tools import ToolCall, ToolMap, offered

# Items a model response leaves in the conversation; Codex resends each of them (plus the tool
# outputs and its own context messages, which are not model turns).
_ASSISTANT_ITEMS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})


class OpenAIResponses:
    """`POST /v1/responses` with `stream: true`, as Codex's `responses` wire API expects it."""

    name = "openai-responses"
    path = "/v1/responses"

    def __init__(self, tools: ToolMap) -> None:
        self.tools = tools

    def turn(self, request: dict) -> int:
        """Assistant-side items already in `input`: tool calls and assistant messages."""
        count = 0
        for item in request.get("input") or []:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind in _ASSISTANT_ITEMS or (kind in (None, "message") and item.get("role") == "assistant"):
                count += 1
        return count

    def tool_call(self, step: Step, request: dict) -> ToolCall | None:
        """The tool map's call for a step (with no working directory); None for a final answer."""
        return self.tools.call(step, None)

    def events(self, step: Step, usage: Usage, request: dict, response_id: str) -> list[bytes]:
        """response.created, one output item (added, text deltas, done), response.completed with usage."""
        model = str(request.get("model") or "mock-model")
        item = output_item(step, self.tool_call(step, request), response_id)
        out = [
            _event("response.created", response=_response(response_id, model, "in_progress", [], None)),
            _event("response.in_progress", response=_response(response_id, model, "in_progress", [], None)),
        ]
        if item["type"] == "message":
            where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
            part = {"type": "output_text", "text": "", "annotations": []}
            out += [
                _event("response.output_item.added", output_index=0, item={**item, "content": []}),
                _event("response.content_part.added", **where, part=part),
                _event("response.output_text.delta", **where, delta=step.text),
                _event("response.output_text.done", **where, text=step.text),
                _event("response.content_part.done", **where, part={**part, "text": step.text}),
            ]
        else:
            out.append(_event("response.output_item.added", output_index=0, item=item))
        out.append(_event("response.output_item.done", output_index=0, item=item))
        out.append(
            _event("response.completed", response=_response(response_id, model, "completed", [item], usage))
        )
        return out

    def error_body(self, status: int) -> dict:
        """OpenAI's error envelope."""
        if status == 429:
            kind, code = "rate_limit_error", "rate_limit_exceeded"
        elif status >= 500:
            kind, code = "server_error", "server_error"
        else:
            kind, code = "invalid_request_error", "invalid_request_error"
        return {
            "error": {
                "message": f"mock provider error (HTTP {status})",
                "type": kind,
                "param": None,
                "code": code,
            }
        }

    def is_side_request(self, request: dict) -> bool:
        """Never: Codex sends no request besides its agent loop (none is in its captured runs)."""
        return False

    def thinking(self, request: dict) -> str | None:
        """`reasoning.effort`."""
        reasoning = request.get("reasoning")
        effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
        return str(effort) if effort is not None else None

    def offered_tools(self, request: dict) -> list[str]:
        """Each tool's `name`, else its `type` (a built-in such as `web_search` has no name)."""
        return offered(request.get("tools"), lambda tool: tool.get("name") or tool.get("type"))


def usage_body(usage: Usage) -> dict:
    """The Responses `usage` object for `usage` (see the module docstring for the mapping)."""
    input_tokens = usage.input + usage.cache_read + usage.cache_write
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cache_read, "cache_write_tokens": usage.cache_write},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning},
        "total_tokens": input_tokens + usage.output,
    }


def output_item(step: Step, call: ToolCall | None, response_id: str) -> dict:
    """The one output item a step (as its tool call, None for final) becomes; ids derive from the
    response id, so they are unique."""
    if call is None:
        return {
            "type": "message",
            "id": f"msg_{response_id}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": step.text, "annotations": []}],
        }
    if isinstance(call.arguments, str):
        return {
            "type": "custom_tool_call",
            "id": f"ctc_{response_id}",
            "call_id": f"call_{response_id}",
            "name": call.name,
            "input": call.arguments,
            "status": "completed",
        }
    return {
        "type": "function_call",
        "id": f"fc_{response_id}",
        "call_id": f"call_{response_id}",
        "name": call.name,
        "arguments": json.dumps(call.arguments),
        "status": "completed",
    }


def _response(response_id: str, model: str, status: str, output: list[dict], usage: Usage | None) -> dict:
    return {
        "id": response_id,
        "object": "response",
        "created_at": 0,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage_body(usage) if usage is not None else None,
    }


def _event(kind: str, **fields: object) -> bytes:
    return sse({"type": kind, **fields}, event=kind)

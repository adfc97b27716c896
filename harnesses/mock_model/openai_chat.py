"""OpenAI Chat Completions, streamed, as Pi's `openai-completions` provider consumes it.

A response is a series of `data: {chunk}` events: the assistant role, then either the answer's text
or one tool call (id, function name, JSON arguments) in `choices[0].delta`, the finish reason
(`tool_calls` or `stop`), a last chunk with no choices carrying `usage` (Pi sends
`stream_options.include_usage`), and `data: [DONE]`. The tool call is the harness's tool map's; this
protocol reads no working directory from a request, so the map gets None.

Usage mapping. Pi (pi-ai 0.73.1, `parseChunkUsage`) derives its usage from the wire as
`cacheWrite = prompt_tokens_details.cache_write_tokens`, `cacheRead = cached_tokens - cacheWrite`
when cacheWrite > 0 (else `cached_tokens`), `input = prompt_tokens - cacheRead - cacheWrite`,
`output = completion_tokens`, and keeps no reasoning count. So the mock reports, for a `Usage` u:

    prompt_tokens = u.input + u.cache_read + u.cache_write
    prompt_tokens_details = {cached_tokens: u.cache_read + u.cache_write, cache_write_tokens: u.cache_write}
    completion_tokens = u.output            (reasoning included, as OpenAI counts it)
    completion_tokens_details.reasoning_tokens = u.reasoning

and Pi's parsed usage equals the ledger's: input = u.input, output = u.output, cacheRead =
u.cache_read, cacheWrite = u.cache_write, totalTokens = their sum. `u.reasoning` is a part of
`u.output` that Pi does not record (its parsed reasoning is 0).
"""

import json
from typing import Any

from harnesses.mock_model.policy import Step
from harnesses.mock_model.server import Usage, sse
from harnesses.mock_model.tools import ToolCall, ToolMap, json_arguments, offered


class OpenAIChat:
    """`POST /v1/chat/completions` with `stream: true`, as Pi's openai-completions provider sends it."""

    name = "openai-chat"
    path = "/v1/chat/completions"

    def __init__(self, tools: ToolMap) -> None:
        self.tools = tools

    def turn(self, request: dict) -> int:
        """Assistant messages already in the history: one per model response served."""
        messages = request.get("messages")
        if not isinstance(messages, list):
            return 0
        return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")

    def tool_call(self, step: Step, request: dict) -> ToolCall | None:
        """The tool map's call for a step (with no working directory); None for a final answer."""
        return self.tools.call(step, None)

    def events(self, step: Step, usage: Usage, request: dict, response_id: str) -> list[bytes]:
        """Role chunk, the text or one tool call, the finish reason, the usage chunk, then [DONE]."""
        model = request.get("model") if isinstance(request.get("model"), str) else "mock-model"

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            body = {"id": response_id, "object": "chat.completion.chunk", "created": 0, "model": model}
            return sse({**body, "choices": choices, **extra})

        def delta(content: dict[str, Any], finish: str | None = None) -> bytes:
            return chunk([{"index": 0, "delta": content, "finish_reason": finish}])

        events = [delta({"role": "assistant", "content": ""})]
        call = self.tool_call(step, request)
        if call is None:
            events.append(delta({"content": step.text}))
            finish = "stop"
        else:
            arguments = json.dumps(json_arguments(call, self.name))
            tool_call = {
                "index": 0,
                "id": f"call_{response_id}",
                "type": "function",
                "function": {"name": call.name, "arguments": arguments},
            }
            events.append(delta({"tool_calls": [tool_call]}))
            finish = "tool_calls"
        events += [delta({}, finish), chunk([], usage=wire_usage(usage)), sse("[DONE]")]
        return events

    def error_body(self, status: int) -> dict:
        """OpenAI's error envelope."""
        if status == 429:
            kind = "rate_limit_error"
        elif status >= 500:
            kind = "server_error"
        else:
            kind = "invalid_request_error"
        return {"error": {"message": f"mock provider error (HTTP {status})", "type": kind, "code": status}}

    def is_side_request(self, request: dict) -> bool:
        """Never: Pi sends no request besides its agent loop (none is in its captured runs)."""
        return False

    def thinking(self, request: dict) -> str | None:
        """`reasoning_effort` (Pi, OpenCode), or the `reasoning.effort` of newer clients."""
        effort = request.get("reasoning_effort")
        if effort is None and isinstance(request.get("reasoning"), dict):
            effort = request["reasoning"].get("effort")
        return str(effort) if effort is not None else None

    def offered_tools(self, request: dict) -> list[str]:
        """The `function.name` of each tool."""
        return offered(request.get("tools"), lambda tool: (tool.get("function") or {}).get("name"))


def wire_usage(usage: Usage) -> dict[str, Any]:
    """The `usage` object that makes Pi parse exactly `usage` (see the module docstring)."""
    cached = usage.cache_read + usage.cache_write
    prompt = usage.input + cached
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output,
        "total_tokens": prompt + usage.output,
        "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": usage.cache_write},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
    }

"""The Gemini API (`generateContent`), as Gemini CLI's @google/genai client consumes it.

Paths: `POST /v1beta/models/{model}:{method}`, the model and the method in the path (the server
hands both over in `request[PATH_PARAMS]`). `streamGenerateContent?alt=sse` is the agent loop: a
response is two server-sent events, `data: {GenerateContentResponse}`: the first carries
`candidates[0].content.parts` (the answer's text, or one `functionCall` with `name` and `args` from
the harness's tool map), the second the `finishReason` (`STOP`, which Gemini sends after a function
call too) and `usageMetadata`. Every other method is a side request (`is_side_request`), answered
as one JSON body: `generateContent` (Gemini CLI's utility calls: model routing, loop detection,
next-speaker checks, summaries and compression, all non-streamed) gets the side text, and
`countTokens` a `totalTokens` of 0. The map gets no working directory: Gemini CLI resolves a
relative path in its workspace.

Usage mapping. Gemini CLI 0.61.0 keeps the last `usageMetadata` of a streamed response and records
it per model message in its session file (`tokens`: `input = promptTokenCount`, `cached =
cachedContentTokenCount`, `output = candidatesTokenCount`, `thoughts = thoughtsTokenCount`, `total =
totalTokenCount`). Gemini counts the cached tokens inside the prompt and the thoughts apart from the
candidates, and has no cache-write count; so the mock reports, for a `Usage` u:

    promptTokenCount        = u.input + u.cache_read + u.cache_write
    cachedContentTokenCount = u.cache_read
    candidatesTokenCount    = u.output - u.reasoning   (the rig counts reasoning inside output)
    thoughtsTokenCount      = u.reasoning
    totalTokenCount         = promptTokenCount + candidatesTokenCount + thoughtsTokenCount

and the parser (`harnesses.gemini.adapter`) reads input = input - cached, cache_read = cached, output =
output + thoughts, reasoning = thoughts, total = total: the ledger's u.input, u.cache_read,
u.output and u.reasoning exactly. `u.cache_write` has no Gemini field: it arrives as uncached input
(parsed cache_write is 0), so a ledger with cache writes cannot equal a Gemini run's tokens.
"""

import json
from typing import Any

from harnesses.mock_model.policy import Step
from harnesses.mock_model.server import PATH_PARAMS, Usage, sse
from harnesses.mock_model.tools import ToolCall, ToolMap, json_arguments, offered

STREAM_METHOD = "streamGenerateContent"
DEFAULT_MODEL = "mock-model"
# The thinking budgets the Gemini API's OpenAI compatibility maps reasoning efforts to: Gemini 2.x
# takes budgets only, so these stand for the efforts.
EFFORT_BUDGETS = {"none": 0, "low": 1024, "medium": 8192, "high": 24576}
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class Gemini:
    """`POST /v1beta/models/{model}:{method}`: SSE for streamGenerateContent, one JSON body otherwise."""

    name = "gemini"
    path = "/v1beta/models/{model}:{method}"

    def __init__(self, tools: ToolMap) -> None:
        self.tools = tools

    def turn(self, request: dict) -> int:
        """Model contents already in the history: one per model response served."""
        contents = request.get("contents")
        if not isinstance(contents, list):
            return 0
        return sum(1 for c in contents if isinstance(c, dict) and c.get("role") == "model")

    def tool_call(self, step: Step, request: dict) -> ToolCall | None:
        """The tool map's call for a step (with no working directory); None for a final answer."""
        return self.tools.call(step, None)

    def content_type(self, request: dict) -> str:
        """Server-sent events for the streamed method, JSON for the others."""
        return "text/event-stream" if _method(request) == STREAM_METHOD else "application/json"

    def events(self, step: Step, usage: Usage, request: dict, response_id: str) -> list[bytes]:
        """The parts, then the finish reason with the usage; one JSON body for a non-streamed method."""
        method = _method(request)
        if method == "countTokens":
            return [json.dumps({"totalTokens": 0}).encode()]
        model = _params(request).get("model", DEFAULT_MODEL)
        call = self.tool_call(step, request)
        part: dict[str, Any]
        if call is None:
            part = {"text": step.text}
        else:
            part = {"functionCall": {"name": call.name, "args": json_arguments(call, self.name)}}
        head = {"modelVersion": model, "responseId": response_id}
        content = {"role": "model", "parts": [part]}
        end = {"usageMetadata": wire_usage(usage), **head}
        if method != STREAM_METHOD:
            candidate = {"content": content, "finishReason": "STOP", "index": 0}
            return [json.dumps({"candidates": [candidate], **end}).encode()]
        return [
            sse({"candidates": [{"content": content, "index": 0}], **head}),
            sse({"candidates": [{"finishReason": "STOP", "index": 0}], **end}),
        ]

    def error_body(self, status: int) -> dict:
        """Google's error envelope: `{"error": {"code", "message", "status"}}`."""
        return {
            "error": {
                "code": status,
                "message": f"mock provider error (HTTP {status})",
                "status": _STATUS.get(status, "UNKNOWN"),
            }
        }

    def is_side_request(self, request: dict) -> bool:
        """Whether a request is outside the agent's loop: any method but streamGenerateContent."""
        return _method(request) != STREAM_METHOD

    def thinking(self, request: dict) -> str | None:
        """`thinkingConfig.thinkingLevel` in lower case (Gemini 3), else the effort its
        `thinkingBudget` stands for (`EFFORT_BUDGETS`), else that budget in tokens."""
        config = (request.get("generationConfig") or {}).get("thinkingConfig")
        if not isinstance(config, dict):
            return None
        if config.get("thinkingLevel") is not None:
            return str(config["thinkingLevel"]).lower()
        budget = config.get("thinkingBudget")
        if budget is None:
            return None
        levels = {tokens: name for name, tokens in EFFORT_BUDGETS.items()}
        return levels.get(budget, f"{budget} tokens")

    def offered_tools(self, request: dict) -> list[str]:
        """The `name` of every function declaration of every tool."""
        tools = request.get("tools")
        declarations = [
            declaration
            for tool in (tools if isinstance(tools, list) else [])
            if isinstance(tool, dict)
            for declaration in (tool.get("functionDeclarations") or [])
        ]
        return offered(declarations, lambda declaration: declaration.get("name"))


def wire_usage(usage: Usage) -> dict[str, int]:
    """The `usageMetadata` that makes Gemini CLI record exactly `usage` (see the module docstring)."""
    prompt = usage.input + usage.cache_read + usage.cache_write
    candidates = usage.output - usage.reasoning
    return {
        "promptTokenCount": prompt,
        "cachedContentTokenCount": usage.cache_read,
        "candidatesTokenCount": candidates,
        "thoughtsTokenCount": usage.reasoning,
        "totalTokenCount": prompt + candidates + usage.reasoning,
    }


def _params(request: dict) -> dict[str, str]:
    params = request.get(PATH_PARAMS)
    return params if isinstance(params, dict) else {}


def _method(request: dict) -> str:
    return _params(request).get("method", STREAM_METHOD)

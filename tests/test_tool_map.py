"""A harness the mock model has never heard of: its own tool map over the protocols the mock serves.

Nothing here changes `harnesses/mock_model/`: the made-up harness brings a `ToolMap` and picks a
protocol, and the calls come back over real HTTP on 127.0.0.1 with its tool names and arguments.
"""

import json
import urllib.request

import pytest

from harnesses.mock_model.anthropic_messages import AnthropicMessages
from harnesses.mock_model.openai_chat import OpenAIChat
from harnesses.mock_model.openai_responses import OpenAIResponses
from harnesses.mock_model.policy import Policy, Step
from harnesses.mock_model.server import MockModelServer, Usage
from harnesses.mock_model.tools import ToolCall, ToolMap

POLICY = Policy(
    "made-up",
    (
        Step("shell", command="make check"),
        Step("read", path="notes/todo.md"),
        Step("write", path="notes/done.md", content="all done\n"),
        Step("final", text="Finished."),
    ),
)


def _rooted(path: str, cwd: str | None) -> str:
    return f"{cwd}/{path}" if cwd else path


MADE_UP = ToolMap(
    shell=lambda command, cwd: ToolCall("run_shell", {"script": command, "cwd": cwd}),
    read=lambda path, cwd: ToolCall("open_file", {"location": _rooted(path, cwd)}),
    write=lambda path, content, cwd: ToolCall("save_file", {"location": _rooted(path, cwd), "text": content}),
)
# A harness whose write tool takes a free-form input, as OpenAI Responses' custom tools do.
FREE_FORM_WRITE = ToolMap(
    shell=MADE_UP.shell,
    read=MADE_UP.read,
    write=lambda path, content, cwd: ToolCall("save_file", f"{path}\n{content}"),
)
EXPECTED = [
    ("run_shell", {"script": "make check", "cwd": None}),
    ("open_file", {"location": "notes/todo.md"}),
    ("save_file", {"location": "notes/done.md", "text": "all done\n"}),
]


def _events(url: str, body: dict) -> list[dict]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        lines = response.read().decode().splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def _chat_call(url: str, turn: int) -> tuple[str, object]:
    messages = [{"role": "user", "content": "go"}] + [{"role": "assistant", "content": "x"}] * turn
    events = _events(url + OpenAIChat.path, {"model": "m", "stream": True, "messages": messages})
    (call,) = [c for e in events for choice in e["choices"] for c in choice["delta"].get("tool_calls", [])]
    return call["function"]["name"], json.loads(call["function"]["arguments"])


def _messages_call(url: str, turn: int) -> tuple[str, object]:
    body = {
        "model": "m",
        "stream": True,
        "system": "Primary working directory: /srv/made-up",
        "tools": [{"name": "run_shell"}],
        "messages": [{"role": "user", "content": "go"}] + [{"role": "assistant", "content": []}] * turn,
    }
    events = _events(url + AnthropicMessages.path, body)
    (start,) = [e for e in events if e["type"] == "content_block_start"]
    (delta,) = [e for e in events if e["type"] == "content_block_delta"]
    return start["content_block"]["name"], json.loads(delta["delta"]["partial_json"])


def _responses_call(url: str, turn: int) -> tuple[str, object]:
    history = [
        {"type": "function_call", "call_id": str(i), "name": "x", "arguments": "{}"} for i in range(turn)
    ]
    events = _events(url + OpenAIResponses.path, {"model": "m", "stream": True, "input": history})
    (item,) = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    if item["type"] == "custom_tool_call":
        return item["name"], item["input"]
    return item["name"], json.loads(item["arguments"])


@pytest.mark.parametrize(
    ("protocol", "read_call", "expected"),
    [
        (OpenAIChat(MADE_UP), _chat_call, EXPECTED),
        (OpenAIResponses(MADE_UP), _responses_call, EXPECTED),
        # Anthropic Messages reads the working directory from the system prompt and hands it to the map.
        (
            AnthropicMessages(MADE_UP),
            _messages_call,
            [
                ("run_shell", {"script": "make check", "cwd": "/srv/made-up"}),
                ("open_file", {"location": "/srv/made-up/notes/todo.md"}),
                ("save_file", {"location": "/srv/made-up/notes/done.md", "text": "all done\n"}),
            ],
        ),
        (
            OpenAIResponses(FREE_FORM_WRITE),
            _responses_call,
            [*EXPECTED[:2], ("save_file", "notes/done.md\nall done\n")],
        ),
    ],
    ids=["openai-chat", "openai-responses", "anthropic-messages", "openai-responses-free-form"],
)
def test_a_new_harness_brings_its_tool_map_to_an_existing_protocol(protocol, read_call, expected):
    with MockModelServer(POLICY, protocols=[protocol]) as server:
        calls = [read_call(server.base_url, turn) for turn in range(3)]
        assert calls == expected
        assert server.tool_calls() == {"run_shell": 1, "open_file": 1, "save_file": 1}
        assert [(e.step_kind, e.tool) for e in server.served()] == [
            ("shell", "run_shell"),
            ("read", "open_file"),
            ("write", "save_file"),
        ]


@pytest.mark.parametrize("protocol", [OpenAIChat(FREE_FORM_WRITE), AnthropicMessages(FREE_FORM_WRITE)])
def test_a_free_form_input_is_refused_by_protocols_with_function_tools_only(protocol):
    with pytest.raises(TypeError, match="no free-form tools"):
        protocol.events(Step("write", path="a", content="b"), Usage(), {"stream": True}, "r")

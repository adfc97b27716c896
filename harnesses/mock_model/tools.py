"""Tool maps: how a harness's own tools carry out the harness-neutral policy's steps.

The policy says what to do (`shell`, `read`, `write`, `final`); a harness's adapter says which of
its tools does it, with which arguments, in a `ToolMap`; a wire protocol renders the resulting
`ToolCall` in its format. So a harness that speaks a protocol the mock already serves brings its
tool map and needs no change here.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harnesses.mock_model.policy import Step


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the harness expects it.

    `arguments` is a JSON object for a function tool, or the whole input of a free-form (custom)
    tool as a string; only OpenAI Responses carries a free-form input (a `custom_tool_call`).
    """

    name: str
    arguments: dict[str, Any] | str


@dataclass(frozen=True)
class ToolMap:
    """A harness's tool call for each kind of step.

    Each callable also gets the working directory the protocol read from the request, or None
    when the protocol reads none (or the request states none); whether paths become absolute is
    the harness's choice, so it is made here. `shell(command, cwd)`, `read(path, cwd)` and
    `write(path, content, cwd)`; a `final` step is an answer, not a tool call.
    """

    shell: Callable[[str, str | None], ToolCall]
    read: Callable[[str, str | None], ToolCall]
    write: Callable[[str, str, str | None], ToolCall]

    def call(self, step: Step, cwd: str | None) -> ToolCall | None:
        """The tool call `step` becomes; None for a final answer."""
        if step.kind == "shell":
            return self.shell(step.command, cwd)
        if step.kind == "read":
            return self.read(step.path, cwd)
        if step.kind == "write":
            return self.write(step.path, step.content, cwd)
        return None


def json_arguments(call: ToolCall, protocol: str) -> dict[str, Any]:
    """The JSON object arguments of `call`; a protocol with function tools only cannot carry a string."""
    if isinstance(call.arguments, str):
        raise TypeError(f"{protocol} has no free-form tools: {call.name!r} needs a JSON object of arguments")
    return call.arguments


def offered(tools: object, name: Callable[[dict[str, Any]], object]) -> list[str]:
    """The names `name` reads from each tool of a request's tool list (skipping what is no tool)."""
    if not isinstance(tools, list):
        return []
    return [str(found) for tool in tools if isinstance(tool, dict) and (found := name(tool)) is not None]

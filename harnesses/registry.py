"""Which adapter runs which harness name."""

from harnesses.base import DEFAULT_STALL_S, Confinement, HarnessAdapter
from harnesses.cli import Provider
from rig.tasks import Task


class HarnessUnavailable(Exception):
    """A harness name with no adapter in this version of rig."""


def make_adapter(
    name: str,
    task: Task,
    stall_s: float = DEFAULT_STALL_S,
    provider: Provider | None = None,
    model: str | None = None,
    thinking: str | None = None,
    confinement: Confinement | None = None,
) -> HarnessAdapter:
    """A fresh adapter for one run of `task`; `thinking` is the default a condition may override.

    `confinement` (sandbox, stream and file bounds) applies to the agent process; None: defaults.
    """
    provider = provider or Provider()
    if name == "scripted":
        from harnesses.scripted import ScriptedHarness

        return ScriptedHarness(task, stall_s=stall_s, confinement=confinement)
    if name == "pi":
        from harnesses.pi import PiHarness

        return PiHarness(task, provider, model, thinking, stall_s, confinement)
    if name == "claude-code":
        from harnesses.claude_code import ClaudeCodeHarness

        return ClaudeCodeHarness(task, provider, model, thinking, stall_s, confinement)
    if name == "codex":
        from harnesses.codex import CodexHarness

        return CodexHarness(task, provider, model, thinking, stall_s, confinement)
    raise HarnessUnavailable(f"harness {name!r} has no adapter; use scripted, pi, claude-code or codex")

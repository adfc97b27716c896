"""A scripted mock model server: how rig proves the real harness CLIs offline.

It speaks the three wire protocols the harnesses use (OpenAI Chat Completions for Pi, Anthropic
Messages for Claude Code, OpenAI Responses for Codex) on 127.0.0.1, plays a harness-neutral policy
translated into each harness's own tools by the tool map its adapter gives (`tools`), reports
configurable token usage, keeps a ledger of everything it served, and can fail on purpose in the
ways real providers fail.
"""

from harnesses.mock_model.policy import Policy, Step, do_nothing, replay_patch
from harnesses.mock_model.server import Faults, LedgerEntry, MockModelServer, Usage

__all__ = [
    "Faults",
    "LedgerEntry",
    "MockModelServer",
    "Policy",
    "Step",
    "Usage",
    "do_nothing",
    "replay_patch",
]

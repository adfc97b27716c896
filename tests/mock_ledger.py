"""What the mock model served in a run, and parsed metrics in the same shape: the adapter tests
compare the two (tokens, responses and tool calls) as `rig calibrate --harness` does."""

import json
from pathlib import Path

from harnesses.mock_model.session import LEDGER_FILE
from rig.schema import Metrics

TOKENS = ("input", "output", "cache_read", "cache_write")


def ledger(folder: Path, keys: tuple[str, ...] = TOKENS) -> tuple[dict[str, int], dict[str, int]]:
    """Token totals (`keys`, and `responses`) and tool calls by name of the responses the mock
    served in full, from `folder`'s ledger; side requests ("side") are not the agent's."""
    entries = [
        e for e in json.loads((folder / LEDGER_FILE).read_text())["ledger"] if e["outcome"] == "served"
    ]
    totals = {key: sum(e["usage"][key] for e in entries) for key in keys}
    totals["responses"] = len(entries)
    tools: dict[str, int] = {}
    for entry in entries:
        if entry["tool"]:
            tools[entry["tool"]] = tools.get(entry["tool"], 0) + 1
    return totals, tools


def parsed_tokens(
    metrics: Metrics, keys: tuple[str, ...] = TOKENS, responses: int | None = None
) -> dict[str, int]:
    """`metrics`'s `<key>_tokens` for each of `keys`, and its responses (`assistant_messages`
    unless the harness counts them otherwise)."""
    totals = {key: getattr(metrics, f"{key}_tokens") for key in keys}
    totals["responses"] = metrics.assistant_messages if responses is None else responses
    return totals


def captured_patch_command(patch: str) -> str:
    """How the mock model applied a patch when the sessions under tests/data were captured: a
    heredoc (it now sends the patch base64-encoded, which Gemini CLI does not refuse)."""
    body = patch if patch.endswith("\n") else patch + "\n"
    return f"git apply --whitespace=nowarn <<'RIG_PATCH_EOF'\n{body}RIG_PATCH_EOF"

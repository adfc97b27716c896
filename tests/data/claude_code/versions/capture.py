"""Capture tests/data/claude_code/versions/<version> from a Claude Code version driven by the mock model.

    npm install --prefix /tmp/claude-2.0.61 @anthropic-ai/claude-code@2.0.61
    .ci/isolated .venv/bin/python tests/data/claude_code/versions/capture.py 2.0.61 \
        /tmp/claude-2.0.61/node_modules/.bin/claude

The adapter's run (`ClaudeCodeHarness.run`) with the shared policy of `tests/data/capture_versions.py`;
versions without `--effort` (2.0) run without it (at their default thinking).
"""

import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from capture_versions import capture  # noqa: E402

from harnesses.claude_code.adapter import ClaudeCodeHarness  # noqa: E402
from rig.schema import AgentRun  # noqa: E402


class OldClaude(ClaudeCodeHarness):
    """The adapter without the `--effort` option of versions that lack it."""

    def run_process(self, command: list[str], *args: Any, **kwargs: Any) -> AgentRun:
        help_text = subprocess.run([command[0], "--help"], capture_output=True, text=True).stdout
        if "--effort" not in help_text and "--effort" in command:
            at = command.index("--effort")
            command = command[:at] + command[at + 2 :]
        return super().run_process(command, *args, **kwargs)


if __name__ == "__main__":
    capture(OldClaude, sys.argv[1], Path(sys.argv[2]), ("session.jsonl",), Path(__file__).parent)

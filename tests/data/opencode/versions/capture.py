"""Capture tests/data/opencode/versions/<version> from an OpenCode version driven by the mock model.

    npm install --prefix /tmp/opencode-1.0.162 opencode-ai@1.0.162
    .ci/isolated .venv/bin/python tests/data/opencode/versions/capture.py 1.0.162 \
        /tmp/opencode-1.0.162/node_modules/.bin/opencode

The adapter's run (`OpenCodeHarness.run`) with the shared policy of `tests/data/capture_versions.py`,
without the options a version's `opencode run --help` does not list (1.0 has no `--pure`, `--dir`
or `--variant`; the run's folder is the workspace anyway). OpenCode 1.0 downloads ripgrep on its
first run unless its data folder has one: the capture puts the rg shipped with the pinned Codex
there (the mock's machine is offline). With `describe` last (1.0 to 1.14, whose bash tool
requires a `description`), the mock's bash calls carry one.
"""

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from capture_versions import capture  # noqa: E402

from harnesses.mock_model.openai_chat import OpenAIChat  # noqa: E402
from harnesses.mock_model.tools import ToolCall, ToolMap  # noqa: E402
from harnesses.opencode.adapter import SESSION_FILE, XDG_DIR, OpenCodeHarness  # noqa: E402
from harnesses.opencode.session import LOG_FILE  # noqa: E402
from rig.paths import REPO_ROOT  # noqa: E402
from rig.schema import AgentRun  # noqa: E402

RIPGREP = next(
    (REPO_ROOT / "harnesses/node/node_modules/@openai").glob("codex-linux-*/vendor/*/codex-path/rg")
)

# The adapter's options, with how many values follow each.
OPTIONS = {"--pure": 0, "--dir": 1, "--variant": 1}


DESCRIBED_TOOLS = ToolMap(
    shell=lambda command, cwd: ToolCall("bash", {"command": command, "description": "Run a command"}),
    read=lambda path, cwd: ToolCall("read", {"filePath": path}),
    write=lambda path, content, cwd: ToolCall("write", {"filePath": path, "content": content}),
)


class OldOpenCode(OpenCodeHarness):
    """The adapter without the options a version lacks."""

    if sys.argv[3:] == ["describe"]:
        mock_protocol = OpenAIChat(DESCRIBED_TOOLS)

    def command(self, workdir: Path, prompt: str, variant: str | None, *rest: Any) -> list[str]:
        command = super().command(workdir, prompt, variant, *rest)
        known = subprocess.run([command[0], "run", "--help"], capture_output=True, text=True).stdout
        for option, values in OPTIONS.items():
            if option in command and option not in known:
                at = command.index(option)
                command = command[:at] + command[at + 1 + values :]
        return command

    def run_process(
        self, command: list[str], workdir: Path, condition: Any, run_dir: Path, *args: Any
    ) -> AgentRun:
        bin_dir = run_dir / XDG_DIR / "data" / "opencode" / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(RIPGREP, bin_dir / "rg")
        return super().run_process(command, workdir, condition, run_dir, *args)


if __name__ == "__main__":
    capture(
        OldOpenCode, sys.argv[1], Path(sys.argv[2]), (SESSION_FILE, LOG_FILE), Path(__file__).parent, git=True
    )

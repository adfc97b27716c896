"""Capture tests/data/codex/versions/<version> from an older Codex CLI driven by the mock model.

    npm install --prefix /tmp/codex-0.125 @openai/codex@0.125.0
    .venv/bin/python tests/data/codex/versions/capture.py 0.125.0 /tmp/codex-0.125/node_modules/.bin/codex

The run is the adapter's (`CodexHarness.run`) on t1_fix_pagination with the `success` policy of
`tests/data/codex/capture.py`, with two changes older versions need: no `--strict-config` (they do
not know it, and refuse it) and, for versions before `exec_command` existed, the mock's shell steps
as the `shell` tool (`{"command": ["bash", "-lc", CMD]}`). The files are kept redacted, as there.
"""

import json
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from capture import KEPT, TASK_ID, serving, success_policy  # noqa: E402

from harnesses import cli_harness  # noqa: E402
from harnesses.codex import adapter as codex
from harnesses.mock_model.openai_responses import OpenAIResponses  # noqa: E402
from harnesses.mock_model.server import Faults  # noqa: E402
from harnesses.mock_model.tools import ToolCall, ToolMap  # noqa: E402
from rig.packs.manifest import load_pack  # noqa: E402
from rig.packs.tasks import load_tasks  # noqa: E402
from rig.paths import REPO_ROOT  # noqa: E402
from rig.schema import Condition, Provider, Task  # noqa: E402
from rig.store.redact import Redactor  # noqa: E402
from rig.workspace.build import apply_patch, copy_fixture  # noqa: E402

# Codex before unified exec: one `shell` function taking an argv.
SHELL_TOOLS = ToolMap(
    shell=lambda command, cwd: ToolCall("shell", {"command": ["bash", "-lc", command]}),
    read=lambda path, cwd: ToolCall("shell", {"command": ["cat", path]}),
    write=lambda path, content, cwd: ToolCall("apply_patch", codex.add_file_patch(path, content)),
)


class OldCodex(codex.CodexHarness):
    """The adapter running another Codex binary, without the flags that version lacks."""

    def __init__(self, task: Task, binary: Path, shell_tool: bool) -> None:
        super().__init__(task, Provider(), None, "high", 30.0)
        self.binary = str(binary)
        if shell_tool:
            self.mock_protocol = OpenAIResponses(SHELL_TOOLS)

    def cli(self) -> Path:
        return Path(self.binary)

    def command(self, workdir: Path, prompt: str, effort: str | None) -> list[str]:
        return [part for part in super().command(workdir, prompt, effort) if part != "--strict-config"]


def main() -> None:
    version, binary = sys.argv[1], Path(sys.argv[2])
    shell_tool = len(sys.argv) > 3 and sys.argv[3] == "shell"
    out = Path(__file__).parent / version
    task = load_tasks(only=[TASK_ID])[0]
    scratch = Path(tempfile.mkdtemp(prefix="codex-capture-"))
    redactor = Redactor.for_machine(runs_root=scratch, repo_root=REPO_ROOT)
    try:
        workdir = copy_fixture(load_pack().fixture_dir, scratch / "work")
        apply_patch(workdir, task.setup_patch)
        run_dir = scratch / "run"
        cli_harness.mock_model = serving(success_policy(task), Faults(), False)  # type: ignore[assignment]
        harness = OldCodex(task, binary, shell_tool)
        run = harness.run(workdir, task.spec.prompt, Condition(name="success"), run_dir, 180)
        print(f"{version}: exit {run.exit_code}, {run.wall_s:.1f}s, {shlex.join(run.command[:3])}")
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for file in KEPT:
            if (run_dir / file).exists():
                shutil.copyfile(run_dir / file, out / file)
        (out / "version.json").write_text(json.dumps({"codex": version, "shell_tool": shell_tool}) + "\n")
        redactor.tree(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Capture tests/data/opencode from the real OpenCode CLI driven by the mock model.

    .ci/isolated .venv/bin/python tests/data/opencode/capture.py [OUT_DIR]

Each case runs `OpenCodeHarness.run` (the adapter, unchanged) in a fresh git-initialised copy of
the fixture in the setup state of t1_fix_pagination, as the rig prepares a workspace, with
`CI=true` in this process's environment, while the mock serves the case's policy and faults. The
run's stdout.log, stderr.log, session.json, opencode.log and mock-ledger.json are kept, redacted
(<RUNS>, <REPO>, <HOME>, <user>, <host>).
"""

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harnesses import cli_harness
from harnesses.mock_model.policy import Policy, Step, patch_command, replay_patch
from harnesses.mock_model.server import Faults, MockModelServer, Usage, WireProtocol
from harnesses.mock_model.session import LEDGER_FILE, gate_command
from harnesses.opencode.adapter import SESSION_FILE, OpenCodeHarness
from harnesses.opencode.session import LOG_FILE
from rig.packs.manifest import load_pack
from rig.packs.tasks import load_tasks
from rig.paths import REPO_ROOT
from rig.schema import Condition, Provider, Task
from rig.store.redact import Redactor
from rig.workspace.build import apply_patch, copy_fixture, init_baseline

TASK_ID = "t1_fix_pagination"
USAGE = Usage(input=1000, output=100, cache_read=500, cache_write=40, reasoning=20)
FINAL = "Fixed: has_next now compares with <."
KEPT = ("stdout.log", "stderr.log", SESSION_FILE, LOG_FILE, LEDGER_FILE)


def success_policy(task: Task) -> Policy:
    """Reads (one of a missing file), a search, a failing command, a write that cannot happen, a
    write, the fix and the gate."""
    return Policy(
        "captured-success",
        (
            Step("read", path="AGENTS.md"),
            Step("shell", command="grep -rn 'has_next' taskapp | head -3"),
            Step("read", path="does-not-exist.txt"),
            Step("shell", command="cat does-not-exist.txt"),
            # `docs` is a directory: the write tool cannot replace it, a tool error.
            Step("write", path="docs", content="not a file\n"),
            Step("write", path="NOTES.md", content="# Notes\n\nhas_next compares with <.\n"),
            Step("shell", command=patch_command(task.solution_patch.read_text())),
            Step("shell", command="python scripts/check.py"),
            Step("shell", command="python -m pytest -q tests/unit 2>&1 | tail -1"),
            Step("shell", command='echo "CI=$CI"'),
            Step("final", text=FINAL),
        ),
    )


def cases(task: Task) -> dict[str, tuple[Policy, Faults, bool]]:
    """Case name -> (policy, faults, server down)."""
    solution = replay_patch("solution", task.solution_patch, gate_command(task))
    return {
        "success": (success_policy(task), Faults(), False),
        "http_500": (solution, Faults(mode="http_error", status=500), False),
        "server_down": (solution, Faults(), True),
        "retry_recovered": (solution, Faults(mode="http_error", status=500, first_n=1), False),
        # The first stream is cut after its tool call chunk, before the finish reason and usage.
        "cut_stream": (solution, Faults(mode="cut_stream", first_n=1, after_events=2), False),
    }


def serving(policy: Policy, faults: Faults, down: bool) -> Any:
    """A stand-in for harnesses.mock_model.session.mock_model serving `policy` with `faults`."""

    @contextlib.contextmanager
    def serve(_task: Task, _options: dict[str, Any], run_dir: Path, protocol: WireProtocol) -> Iterator[str]:
        server = MockModelServer(policy, usage=USAGE, faults=faults, protocols=[protocol]).start()
        url = server.base_url
        if down:
            server.stop()
        try:
            yield url
        finally:
            if not down:
                server.stop()
            ledger = [asdict(e) for e in server.ledger]
            (run_dir / LEDGER_FILE).write_text(
                json.dumps({"policy": policy.name, "ledger": ledger}, indent=2)
            )

    return serve


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    only = sys.argv[2:]
    task = load_tasks(only=[TASK_ID])[0]
    os.environ["CI"] = "true"
    scratch = Path(tempfile.mkdtemp(prefix="opencode-capture-"))
    redactor = Redactor.for_machine(runs_root=scratch, repo_root=REPO_ROOT)
    try:
        for name, (policy, faults, down) in cases(task).items():
            if only and name not in only:
                continue
            workdir = copy_fixture(load_pack().fixture_dir, scratch / name / "work")
            apply_patch(workdir, task.setup_patch)
            init_baseline(workdir, scratch / name / "rig.git")
            run_dir = scratch / name / "run"
            cli_harness.mock_model = serving(policy, faults, down)  # type: ignore[assignment]
            harness = OpenCodeHarness(
                task=task, provider=Provider(), model=None, thinking="high", stall_s=120.0
            )
            run = harness.run(workdir, task.spec.prompt, Condition(name=name), run_dir, 300)
            print(f"{name}: exit {run.exit_code}, {run.wall_s:.1f}s")
            target = out / name
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for file in KEPT:
                if (run_dir / file).exists():
                    shutil.copyfile(run_dir / file, target / file)
            redactor.tree(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Capture tests/data/codex from the real Codex CLI driven by the mock model.

    .venv/bin/python tests/data/codex/capture.py [OUT_DIR]

Each case runs `CodexHarness.run` (the adapter, unchanged) in a fresh copy of the fixture in the
setup state of t1_fix_pagination, with `CI=true` in this process's environment, while the mock
serves the case's policy and faults. The run's stdout.log, stderr.log, session.jsonl and
mock-ledger.json are kept, redacted (<RUNS>, <REPO>, <HOME>, <user>, <host>).
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
from harnesses.codex import adapter as codex
from harnesses.mock_model.policy import Policy, Step, do_nothing, patch_command, replay_patch
from harnesses.mock_model.server import Faults, MockModelServer, Usage, WireProtocol
from harnesses.mock_model.session import LEDGER_FILE, gate_command
from rig.packs.manifest import load_pack
from rig.packs.tasks import load_tasks
from rig.paths import REPO_ROOT
from rig.schema import Condition, Provider, Task
from rig.store.redact import Redactor
from rig.workspace.build import apply_patch, copy_fixture

TASK_ID = "t1_fix_pagination"
USAGE = Usage(input=1000, output=100, cache_read=500, cache_write=40, reasoning=20)
FINAL = "Fixed: has_next now compares with <."
KEPT = ("stdout.log", "stderr.log", "session.jsonl", LEDGER_FILE)


def success_policy(task: Task) -> Policy:
    """Reads, a search, a failing command, a patch that cannot apply, a write, the fix and the gate."""
    return Policy(
        "captured-success",
        (
            Step("read", path="AGENTS.md"),
            Step("shell", command="grep -rn 'has_next' taskapp | head -3"),
            Step("shell", command="sed -n 40,45p taskapp/utils/pagination.py"),
            Step("shell", command="cat does-not-exist.txt"),
            # `docs` is a directory: apply_patch cannot add it, a tool error.
            Step("write", path="docs", content="not a file\n"),
            Step("write", path="NOTES.md", content="# Notes\n\nhas_next compares with <.\n"),
            Step("shell", command=patch_command(task.solution_patch.read_text())),
            Step("shell", command="python scripts/check.py"),
            Step("shell", command="python -m pytest -q tests/unit 2>&1 | tail -1"),
            Step("shell", command='echo "CI=$CI"'),
            Step("final", text=FINAL),
        ),
    )


def cases(task: Task) -> dict[str, tuple[Policy, Faults, bool, int]]:
    """Case name -> (policy, faults, server down, stream retries)."""
    solution = replay_patch("solution", task.solution_patch, gate_command(task))
    # The first response is cut after its tool call is complete: Codex runs the tool, then the turn
    # fails (the adapter's config: no stream retries) or, with one retry, goes on.
    cut = Faults(mode="cut_stream", first_n=1, after_events=4)
    return {
        "success": (success_policy(task), Faults(), False, 0),
        "http_500": (solution, Faults(mode="http_error", status=500), False, 0),
        "server_down": (solution, Faults(), True, 0),
        "cut_stream": (solution, cut, False, 0),
        "stream_retry_recovered": (do_nothing(), cut, False, 1),
    }


class RetryingHarness(codex.CodexHarness):
    """The adapter with Codex's stream retries on, to capture what a recovered retry looks like."""

    def __init__(self, task: Task, retries: int) -> None:
        super().__init__(task, Provider(), None, "high", 30.0)
        self.retries = retries

    def config(self, base_url: str, tools: list[str] | None) -> dict[str, Any]:
        config = super().config(base_url, tools)
        config["model_providers"][codex.MOCK_PROVIDER]["stream_max_retries"] = self.retries
        return config


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
    task = load_tasks(only=[TASK_ID])[0]
    os.environ["CI"] = "true"
    scratch = Path(tempfile.mkdtemp(prefix="codex-capture-"))
    redactor = Redactor.for_machine(runs_root=scratch, repo_root=REPO_ROOT)
    try:
        for name, (policy, faults, down, retries) in cases(task).items():
            workdir = copy_fixture(load_pack().fixture_dir, scratch / name / "work")
            apply_patch(workdir, task.setup_patch)
            run_dir = scratch / name / "run"
            # The base class starts the mock for every adapter: the case's server replaces it there.
            cli_harness.mock_model = serving(policy, faults, down)  # type: ignore[assignment]
            harness = RetryingHarness(task, retries)
            run = harness.run(workdir, task.spec.prompt, Condition(name=name), run_dir, 120)
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

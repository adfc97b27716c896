"""Capture tests/data/claude_code from the real Claude Code CLI driven by the mock model.

    .ci/isolated .venv/bin/python tests/data/claude_code/capture.py [OUT_DIR]

Each case of the README's table runs `ClaudeCodeHarness.run` (the adapter, unchanged) in a fresh copy
of the fixture in the setup state of t1_fix_pagination, with `CI=true` in this process's environment
(the adapter's environment is built from nothing, so it must not reach the CLI). The mock model is
the real one (`harnesses.mock_model.session.mock_model`), configured by the case's harness_options,
as in a run of the rig. The run's stdout.log, stderr.log, session.jsonl and mock-ledger.json are
kept, with command.json (the command line, prompt replaced by `<PROMPT>`), redacted (<RUNS>,
<REPO>, <HOME>, <user>, <host>).

Run it inside `.ci/isolated`: the CLI then cannot reach any host but the mock, and a connection it
tries anyway shows as an error on stderr, which this script prints.
"""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from harnesses.claude_code.adapter import ClaudeCodeHarness
from harnesses.mock_model.session import LEDGER_FILE
from rig.packs.manifest import load_pack
from rig.packs.tasks import load_tasks
from rig.paths import REPO_ROOT
from rig.schema import Condition, Provider
from rig.store.redact import Redactor
from rig.workspace.build import apply_patch, copy_fixture

TASK_ID = "t1_fix_pagination"
KEPT = ("stdout.log", "stderr.log", "session.jsonl", LEDGER_FILE)
PROMPT = "<PROMPT>"
TIMEOUT_S = 120
STALL_S = 30.0
# Case name -> (harness_options, thinking level): the README's table.
CASES: dict[str, tuple[dict[str, Any], str | None]] = {
    "success": (
        {"mock_usage": {"input": 1000, "output": 100, "cache_read": 500, "cache_write": 30, "reasoning": 20}},
        "medium",
    ),
    "api_error": ({"mock_faults": {"mode": "http_error", "status": 500}}, None),
    "retry": (
        {
            "mock_policy": "nothing",
            "max_retries": 1,
            "mock_faults": {"mode": "http_error", "status": 529, "first_n": 1},
        },
        None,
    ),
}


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    task = load_tasks(only=[TASK_ID])[0]
    os.environ["CI"] = "true"
    scratch = Path(tempfile.mkdtemp(prefix="claude-capture-"))
    redactor = Redactor.for_machine(runs_root=scratch, repo_root=REPO_ROOT)
    try:
        for name, (options, thinking) in CASES.items():
            workdir = copy_fixture(load_pack().fixture_dir, scratch / name / "work")
            apply_patch(workdir, task.setup_patch)
            run_dir = scratch / name / "run"
            harness = ClaudeCodeHarness(task, Provider(kind="mock"), None, thinking, STALL_S)
            condition = Condition(name=name, harness_options=options)
            run = harness.run(workdir, task.spec.prompt, condition, run_dir, TIMEOUT_S)
            metrics = harness.parse_session(run)
            print(
                f"{name}: exit {run.exit_code}, {run.wall_s:.1f}s, {harness.version()}, "
                f"infra {harness.infra_signature(run, metrics)}, stop reasons {metrics.stop_reasons}"
            )
            stderr = run.stderr_path.read_text(errors="replace").strip() if run.stderr_path.exists() else ""
            if stderr:
                print(f"{name}: stderr:\n{stderr}")
            target = out / name
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for file in KEPT:
                if (run_dir / file).exists():
                    shutil.copyfile(run_dir / file, target / file)
            # The prompt is the task's, already in the repository; the command line is what matters.
            command = [PROMPT if arg == task.spec.prompt else arg for arg in run.command]
            (target / "command.json").write_text(json.dumps(command))
            redactor.tree(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

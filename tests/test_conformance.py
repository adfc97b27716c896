"""The harnesses' conformance suite: every calibrated harness (a sixth one included, unnamed)
through every check of `rig calibrate --harness`, the real CLIs against the mock model, side by
side in one calibration; one test per harness and check.

The reference solution succeeds with every token figure and tool call equal to the mock's ledger,
per model, as the harness declares it reads them, every request asking the model for the run's
thinking level; doing nothing fails; a dead server, HTTP 500,
429 and 529, a stall, a cut stream and a request never answered are infrastructure; a tool call
that never returns is the agent's hang. The other capabilities have their own suites, each
parametrised over the harnesses that declare them: run budgets (tests/test_run_budget.py),
appended system prompts (tests/test_condition_factors.py), the silence after a final answer
(tests/test_after_final.py), compaction (tests/test_compaction.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harnesses.registry import adapter_class, calibrated_names
from rig.calibrate.harness import FAULTS, THINKING

RIG = str(Path(sys.executable).with_name("rig"))
TASK = "t1_fix_pagination"
CHECKS = [f"{TASK} solution", f"{TASK} nothing", *FAULTS, "tool_hang"]


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, str], dict]:
    proc = subprocess.run(
        [RIG, "calibrate", "--harness", "all", "--task", TASK, "--json"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.stdout, proc.stderr
    checks = json.loads(proc.stdout)["checks"]
    # Every check of every calibrated harness, in order, and no other.
    assert [(c["harness"], c["name"]) for c in checks] == [(h, n) for h in calibrated_names() for n in CHECKS]
    assert (proc.returncode == 0) == all(c["passed"] for c in checks), proc.stderr
    return {(c["harness"], c["name"]): c for c in checks}


@pytest.mark.slow
@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("harness", calibrated_names())
def test_conformance(outcomes, harness, check):
    outcome = outcomes[harness, check]
    assert outcome["passed"], outcome["reason"]
    if check.endswith("solution"):
        assert (
            "per model and tool calls" in outcome["reason"] and "equal the mock's ledger" in outcome["reason"]
        )
        if adapter_class(harness).factors.thinking:
            assert f"every request asked for thinking {THINKING!r}" in outcome["reason"]
    elif check in FAULTS:
        assert outcome["reason"].startswith("infrastructure failure")
    elif check == "tool_hang":
        assert outcome["reason"].startswith("the agent's hang")

"""The harnesses' conformance suite: every calibrated harness (a sixth one included, unnamed)
through every check of `rig calibrate --harness`, the real CLIs against the mock model, side by
side in one calibration; one test per harness and check.

The reference solution succeeds with every token figure and tool call equal to the mock's ledger,
per model, as the harness declares it reads them, every request asking the model for the run's
thinking level; doing nothing fails; a dead server, HTTP 500,
429 and 529, a stall, a cut stream and a request never answered are infrastructure; a tool call
that never returns is the agent's hang; a CLI that its own hook or plugin holds alive and silent
after its final answer (`silent_after_final`: the mock cannot play that fault, since no CLI asks
the model anything after answering) is ended and scored on its work. The other capabilities have
their own suites, each parametrised over the harnesses that declare them: run budgets
(tests/test_run_budget.py), appended system prompts (tests/test_condition_factors.py), the silence
after a final answer on each CLI's captured stream (tests/test_after_final.py), compaction
(tests/test_compaction.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harnesses.registry import adapter_class, calibrated_names, harness_names
from rig.calibrate.harness import AFTER_FINAL, FAULTS, THINKING, checks_of
from rig.packs.tasks import load_tasks

RIG = str(Path(sys.executable).with_name("rig"))
TASK = "t1_fix_pagination"
TASKS = load_tasks(only=[TASK])


def checks(harness: str) -> list[str]:
    """The names of `harness`'s checks on TASK, as `rig calibrate --harness` runs them."""
    return [name for name, _task, _fields in checks_of(harness, TASKS)]


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, str], dict]:
    proc = subprocess.run(
        [RIG, "calibrate", "--harness", "all", "--task", TASK, "--json"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.stdout, proc.stderr
    ran = json.loads(proc.stdout)["checks"]
    # Every check of every calibrated harness, in order, and no other.
    assert [(c["harness"], c["name"]) for c in ran] == [(h, n) for h in calibrated_names() for n in checks(h)]
    assert (proc.returncode == 0) == all(c["passed"] for c in ran), proc.stderr
    return {(c["harness"], c["name"]): c for c in ran}


def test_every_calibrated_harness_is_held_open_after_its_answer_or_says_why():
    for name in harness_names():
        cls = adapter_class(name)
        if cls.calibrated:
            assert cls.silent_after_final is not None or cls.lacks.get("silent_after_final"), name


@pytest.mark.slow
@pytest.mark.parametrize(("harness", "check"), [(h, c) for h in calibrated_names() for c in checks(h)])
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
        if check == "never_answer":
            # No CLI times a request out sooner than the rig's watchdog, which ends it as the
            # provider's stall (a stream gone silent may meet the CLI's own idle timeout first:
            # Codex's is 20 s, as long as the calibration's watchdog).
            assert outcome["reason"].startswith("infrastructure failure, rule stalled_provider ")
    elif check == "tool_hang":
        assert outcome["reason"].startswith("the agent's hang")
    elif check == AFTER_FINAL:
        assert outcome["reason"].startswith("ended after its final answer, scored on its work: success")

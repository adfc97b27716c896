"""The offline AGENTS.md demo end to end: the real Pi CLI, the simulated agent, the report."""

import os
import subprocess
import sys
from pathlib import Path

import atif
import pytest

from rig.analysis import compare_success, load_runs
from rig.paths import REPO_ROOT

RIG = str(Path(sys.executable).with_name("rig"))
DEMO = REPO_ROOT / "experiments" / "demo_agents_md.toml"


@pytest.mark.slow
def test_demo_report_finds_the_planted_effect_with_a_ci(tmp_path):
    env = {
        **os.environ,
        "RIG_RESULTS_ROOT": str(tmp_path / "results"),
        "RIG_RUNS_ROOT": str(tmp_path / "runs"),
    }
    run = subprocess.run([RIG, "run", str(DEMO)], env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr
    report = subprocess.run([RIG, "report", str(DEMO)], env=env, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr
    folder = tmp_path / "results" / "demo_agents_md"
    runs = load_runs(folder)
    assert len(runs) == 40
    effect = compare_success(runs, "no_agents_md", "agents_md")
    # Planted: 0.9 with AGENTS.md vs 0.4 without; the interval must exclude no effect.
    assert effect.ci_low > 0 and effect.p_value < 0.05
    assert 0.2 < effect.effect < 0.8
    text = (folder / "report.md").read_text()
    assert "| success rate | `agents_md` vs `no_agents_md` |" in text
    assert (folder / "failures.md").is_file() and (folder / "figures" / "effects_forest.png").is_file()
    # Every attempt, scored or quarantined, exports to a valid ATIF trajectory of its Pi session.
    export = subprocess.run([RIG, "export", str(DEMO)], env=env, capture_output=True, text=True, timeout=600)
    assert export.returncode == 0, export.stderr
    quarantine = folder / "quarantine.jsonl"
    attempts = 40 + (len(quarantine.read_text().splitlines()) if quarantine.exists() else 0)
    trajectories = [atif.Trajectory.model_validate_json(f.read_text()) for f in (folder / "atif").iterdir()]
    assert len(trajectories) == attempts
    scored = [t for t in trajectories if t.extra["rig"]["status"] == "scored"]
    assert len(scored) == 40 and sum(t.extra["rig"]["success"] for t in scored) == sum(runs["success"])
    assert all(t.agent.name == "pi" and any(s.tool_calls for s in t.steps) for t in scored)

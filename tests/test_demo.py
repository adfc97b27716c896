"""The offline AGENTS.md demo end to end: the real Pi CLI, the simulated agent, the report."""

import os
import subprocess
import sys
from pathlib import Path

import atif
import pytest

from rig.analysis import THESE_TASKS, compare_success, load_runs
from rig.paths import REPO_ROOT
from rig.report.document import fmt_p

RIG = str(Path(sys.executable).with_name("rig"))
DEMO = REPO_ROOT / "experiments" / "demo_agents_md.toml"


@pytest.mark.slow
def test_demo_report_finds_the_planted_effect_with_a_ci(tmp_path):
    # `rig demo` in a folder of its own, as a user who installed rig would start it.
    env = {**os.environ, "RIG_RUNS_ROOT": str(tmp_path / "runs")}
    env.pop("RIG_RESULTS_ROOT", None)
    here = tmp_path / "anywhere"
    here.mkdir()
    demo = subprocess.run([RIG, "demo"], cwd=here, env=env, capture_output=True, text=True, timeout=1800)
    assert demo.returncode == 0, demo.stderr
    folder = here / "rig-results" / "demo_agents_md"
    steps = [line for line in demo.stderr.splitlines() if line.startswith("$ rig ")]
    assert steps == [
        "$ rig calibrate",
        f"$ rig run {DEMO} --results-root rig-results",
        f"$ rig report {DEMO} --results-root rig-results",
    ]
    printed = demo.stdout.splitlines()
    # Each comparison as report.md states it, then where it wrote.
    success = next(line for line in printed if line.startswith("success rate, agents_md vs no_agents_md: "))
    text = (folder / "report.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| success rate | `agents_md` vs "))
    cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
    assert success == (
        f"success rate, agents_md vs no_agents_md: {cells[2]} {cells[3]}, p = {cells[5]} (Holm {cells[6]})"
    )
    assert printed[-1] == f"results: {folder}; the report: {folder / 'report.md'}"
    env["RIG_RESULTS_ROOT"] = str(here / "rig-results")
    runs = load_runs(folder)
    assert len(runs) == 40
    effect = compare_success(runs, "no_agents_md", "agents_md")
    # Planted: 0.9 with AGENTS.md vs 0.4 without; the interval must exclude no effect.
    assert effect.ci_low > 0 and effect.p_value < 0.05
    assert 0.2 < effect.effect < 0.8
    # The README and docs/demo.md quote the report's numbers, for both questions.
    these = compare_success(runs, "no_agents_md", "agents_md", THESE_TASKS)
    quoted = f"{cells[2]} {cells[3]}, p = {cells[5]} (Holm {cells[6]})"
    for doc in (REPO_ROOT / "README.md", REPO_ROOT / "docs" / "demo.md"):
        words = " ".join(doc.read_text().split())
        assert quoted in words and f"p = {fmt_p(these.p_value)}" in words, doc
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

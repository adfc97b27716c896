"""`rig run --dry-run` estimates what the rest of an experiment costs, and a budget (`max_cost_usd`,
`max_runs`) stops a real `rig run` of the scripted harness (whose every model message costs a fixed
amount, harnesses/scripted/agent.py) at the right run, then lets it resume once raised."""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

RIG = str(Path(sys.executable).with_name("rig"))
REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "tests" / "data" / "results_small" / "results_small"
SMALL_CONFIG = REPO / "tests" / "data" / "results_small.toml"


def rig(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RIG_RESULTS_ROOT": str(tmp / "results"),
        "RIG_RUNS_ROOT": str(tmp / "runs"),
        "RIG_CALIBRATION_DIR": str(tmp / "calibration"),
    }
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=600, env=env)


def listing(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


def test_a_dry_run_estimates_from_the_experiments_own_runs_and_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "results" / "results_small"
    shutil.copytree(SMALL, folder)
    lines = (folder / "runs.jsonl").read_text().splitlines(keepends=True)
    kept = lines[:12]
    (folder / "runs.jsonl").write_text("".join(kept))
    costs = [json.loads(line)["metrics"]["cost_usd"] for line in kept]
    before = listing(tmp_path)

    proc = rig(tmp_path, "run", str(SMALL_CONFIG), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "results_small: 30 runs planned in 15 blocks" in out
    assert "12 runs already recorded, 18 to run with 2 workers" in out
    mean = statistics.fmean(costs)
    assert f"estimated cost of the 18 runs to go: ${mean * 18:.2f} (${mean:.4f} a run; likely $" in out
    assert (
        f"how: from this experiment's 12 scored runs (mean ${mean:.4f}, sd ${statistics.stdev(costs):.4f}"
        in out
    )
    # Every cell is listed with its counts, and the order's first blocks are shown.
    assert re.search(r"t1_fix_pagination / agents_md\s+3\s+\d\s+0\s+\d", out)
    assert out.count(" -> ") == 4
    assert "preflight: all 7 checks passed; nothing was run" in out
    assert listing(tmp_path) == before


def test_a_dry_run_without_runs_prices_the_typical_usage_table(tmp_path: Path) -> None:
    proc = rig(tmp_path, "run", str(REPO / "experiments" / "claude_code_agents_md.toml"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "0 runs already recorded, 60 to run with 3 workers" in proc.stdout
    cost = re.search(r"estimated cost of the 60 runs to go: \$(\d+\.\d\d) \(\$(\d+\.\d+) a run", proc.stdout)
    assert cost and float(cost.group(1)) > 0
    assert "typical tokens of one task for claude-code (typical_usage.json" in proc.stdout
    assert "priced by genai-prices for claude-sonnet-4-5; uncertain by a factor of 3" in proc.stdout
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()


CONFIG = """harness = "scripted"
model = "scripted"
tasks = ["t1_fix_pagination"]
repetitions = 1
workers = 1
seed = 3
{budget}
[timeouts]
agent_s = 60
stall_s = 30

[[conditions]]
name = "a"

[[conditions]]
name = "b"
remove_files = ["AGENTS.md"]

[[conditions]]
name = "c"
write_files = {{ "NOTES.md" = "notes" }}
"""


def recorded(tmp: Path) -> list[dict]:
    path = tmp / "results" / "budget" / "runs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_a_budget_stops_starting_runs_and_a_raised_one_resumes(tmp_path: Path) -> None:
    config = tmp_path / "budget.toml"
    config.write_text(CONFIG.format(budget="max_cost_usd = 0.01"))
    proc = rig(tmp_path, "run", str(config))
    runs = recorded(tmp_path)
    per_run = {r["metrics"]["cost_usd"] for r in runs}
    assert len(per_run) == 1, per_run  # the scripted solution: the same messages, the same cost
    (cost,) = per_run
    # The first run starts on no estimate; each next one only if spent + its own cost fits.
    assert len(runs) == int(0.01 // cost) == 1
    assert proc.returncode == 3, proc.stderr
    assert (
        f"stopped at the budget: 1 of 3 runs recorded, ${cost:.2f} spent (max_cost_usd = 0.01; "
        f"about ${cost:.4f} a run); raise max_cost_usd in the experiment's config (to about "
        f"{3 * cost:.2f} for the 2 runs left) and rerun to resume"
    ) in proc.stderr

    # Raised, the run resumes where it stopped, until max_runs caps it.
    config.write_text(CONFIG.format(budget="max_cost_usd = 1.0\nmax_runs = 2"))
    proc = rig(tmp_path, "run", str(config))
    assert proc.returncode == 3, proc.stderr
    assert len(recorded(tmp_path)) == 2
    assert "stopped at the budget: 2 of 3 runs recorded" in proc.stderr
    assert (
        "(max_runs = 2); raise max_runs in the experiment's config (to 3 for the 1 runs left)" in proc.stderr
    )

    status = rig(tmp_path, "status", str(config))
    assert status.returncode == 0, status.stderr
    assert (
        f"spent: ${2 * cost:.4f} over 2 attempts, infrastructure failures included; budget: "
        f"max_cost_usd = 1 ({2 * cost:.0%} used), max_runs = 2 (2 scored)"
    ) in status.stdout

    report = rig(tmp_path, "report", str(config), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"spent: ${2 * cost:.4f} over 2 attempts, infrastructure failures included" in text

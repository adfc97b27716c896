"""`rig run` with `[stopping]` end to end: the scripted harness, real workspaces, gates and records.

tests/test_sequential.py holds the statistics (simulated A/A and planted effects) and the config.
"""

import json

import pytest
from sequential_configs import config, rig


@pytest.mark.slow
def test_rig_run_stops_once_decided_reports_the_runs_saved_and_a_resume_starts_nothing(tmp_path) -> None:
    # A large planted effect: the solution against doing nothing, 5 tasks, at most 4 rounds (40 runs).
    path = tmp_path / "stop.toml"
    path.write_text(config('[stopping]\ncompare = ["without", "with"]\nmin_effect = 0.5\n', "solution"))
    proc = rig(tmp_path, "run", str(path))
    assert proc.returncode == 0, proc.stderr
    runs = tmp_path / "results" / "stop" / "runs.jsonl"
    records = [json.loads(line) for line in runs.read_text().splitlines()]
    # Round 2's look decides (all 10 pairs for `with`; round 1's 5 cannot pass O'Brien-Fleming's first
    # boundary), when the last of its runs is recorded. Runs of round 3 may finish before that one
    # (under load runs end out of order); after it, only runs already in flight (at most one per
    # other worker) finish: records are appended as runs finish.
    rounds = [int(r["run_id"].rpartition("__r")[2]) for r in records]
    assert sum(1 for n in rounds if n <= 2) == 20
    decided_at = max(i for i, n in enumerate(rounds) if n <= 2)
    assert len(records) - 1 - decided_at <= 1, rounds
    assert all(r["success"] == (r["condition"] == "with") for r in records)
    assert "stopped at look 2 of 4 (with vs without): effect found" in proc.stdout
    assert f"{len(records)} of the fixed design's 40 runs recorded, {40 - len(records)} saved" in proc.stdout

    again = rig(tmp_path, "run", str(path))
    assert again.returncode == 0, again.stderr
    assert "none to run: [stopping] decided" in again.stderr
    assert len(runs.read_text().splitlines()) == len(records)  # nothing new started
    assert "stopped at look 2 of 4" in again.stdout

    # `rig status` counts the runs the decision made unnecessary apart from those still pending.
    status = rig(tmp_path, "status", str(path))
    assert status.returncode == 0, status.stderr
    assert "not needed" in status.stdout and "stopped at look 2 of 4" in status.stdout
    rows = [line.split("│") for line in status.stdout.splitlines() if line.startswith("│ t")]
    assert len(rows) == 10 and all(int(row[5]) == 0 for row in rows)  # nothing pending
    assert sum(int(row[8]) for row in rows) == 40 - len(records)

    report = rig(tmp_path, "report", str(path))
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "results" / "stop" / "report.md").read_text()
    assert "### Sequential stopping of `stop`: `with` vs `without`" in text
    assert "Sequential verdict: **effect found** (`with` succeeds more often); stopped at look 2 of 4" in text
    assert f"Runs: {len(records)} recorded of the fixed design's 40, **{40 - len(records)} saved**" in text
    assert "| 2 | 10 | 10 / 0 | 10 | 9 |" in text

"""One estimand per decision (issue 40 item 1) as `rig report` states it, and `rig report DIR --format json`.

The committed results set (tests/data/results_small) is reported from its folder, as declared
(population, the default) and with its experiment.json declaring `these_tasks`: the report says in one
sentence which question it answers, and its success row carries that estimand's interval and test;
report.json holds the same numbers as `compare_conditions`, for scripts.
"""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rig.analysis import (
    EXACT_TEST,
    POPULATION,
    THESE_TASKS,
    WALD_TEST,
    compare_conditions,
    load_runs,
)
from rig.experiment.load import ExperimentError, load_experiment
from rig.report.comparisons import QUESTIONS

RIG = str(Path(sys.executable).with_name("rig"))
SMALL = Path(__file__).parent / "data" / "results_small" / "results_small"
KEYS = {
    "metric",
    "group",
    "estimand",
    "reference",
    "other",
    "effect",
    "ci_low",
    "ci_high",
    "p",
    "p_holm",
    "n",
}


def _copy(tmp_path: Path, estimand: str | None) -> Path:
    folder = tmp_path / "results_small"
    shutil.copytree(SMALL, folder, ignore=shutil.ignore_patterns("runs.cache"))
    if estimand is not None:
        design = json.loads((folder / "experiment.json").read_text())
        design["experiment"]["estimand"] = estimand
        (folder / "experiment.json").write_text(json.dumps(design))
    return folder


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIG, "report", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("estimand", [None, THESE_TASKS])
def test_the_report_answers_the_declared_question_with_its_own_interval_and_test(tmp_path, estimand):
    folder = _copy(tmp_path, estimand)
    declared = estimand or POPULATION
    done = _report(str(folder), "--format", "json", "--out", str(tmp_path / "json"))
    assert done.returncode == 0, done.stderr
    body = json.loads((tmp_path / "json" / "report.json").read_text())
    assert body["estimand"] == declared and [c["metric"] for c in body["comparisons"]] == ["success"]
    (row,) = body["comparisons"]
    assert set(row) == KEYS and row["group"] == "" and row["estimand"] == declared
    df = load_runs(folder)
    assert df.attrs["estimand"] == declared
    expected = next(c for c in compare_conditions(df) if c.metric == "success")
    assert (row["reference"], row["other"]) == (expected.a, expected.b) == ("agents_md", "no_agents_md")
    for key, value in (
        ("effect", expected.effect),
        ("ci_low", expected.ci_low),
        ("ci_high", expected.ci_high),
    ):
        assert row[key] == pytest.approx(value)
    assert (row["p"], row["p_holm"], row["n"]) == (
        pytest.approx(expected.p_value),
        pytest.approx(expected.p_adjusted),
        expected.n_a + expected.n_b,
    )
    assert expected.test == (WALD_TEST if declared == POPULATION else EXACT_TEST)
    # The same folder's report.md says which question it answers and shows that test.
    done = _report(str(folder), "--out", str(tmp_path / "md"))
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "md" / "report.md").read_text()
    assert (
        QUESTIONS[declared] in text
        and QUESTIONS[POPULATION if declared == THESE_TASKS else THESE_TASKS] not in text
    )
    success = next(line for line in text.splitlines() if line.startswith("| success rate |"))
    assert expected.test in success


def test_report_json_writes_nan_as_null_and_refuses_a_folder_without_runs(tmp_path):
    folder = _copy(tmp_path, None)
    # Every run of one arm failed and of the other passed in one task only: still a number. Make the
    # interval undefined instead: one task left, so no interval over tasks (NaN -> null).
    lines = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()]
    first = lines[0]["task"]
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines if r["task"] == first))
    done = _report(str(folder), "--format", "json", "--out", str(tmp_path / "json"))
    assert done.returncode == 0, done.stderr
    raw = (tmp_path / "json" / "report.json").read_text()
    assert "NaN" not in raw
    (row,) = json.loads(raw)["comparisons"]
    assert row["ci_low"] is None and row["ci_high"] is None and row["p"] is None and row["effect"] is not None
    assert not math.isnan(row["effect"])
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = _report(str(empty))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "without runs.jsonl" in refused.stderr
    refused = _report(str(folder), "--format", "pdf")
    assert refused.returncode == 2 and "unknown format 'pdf'; use md, html, json" in refused.stderr


def test_stopping_needs_the_these_tasks_question_and_rig_power_takes_either(tmp_path):
    config = tmp_path / "stop.toml"
    body = (
        'harness = "scripted"\ntasks = ["t1_fix_pagination"]\n{estimand}'
        '[[conditions]]\nname = "a"\n[[conditions]]\nname = "b"\n'
        '[stopping]\ncompare = ["a", "b"]\nmin_effect = 0.3\n'
    )
    config.write_text(body.format(estimand=""))
    with pytest.raises(ExperimentError, match='set estimand = "these_tasks"'):
        load_experiment(config)
    config.write_text(body.format(estimand='estimand = "these_tasks"\n'))
    assert load_experiment(config).estimand == THESE_TASKS
    bad = subprocess.run([RIG, "power", "--estimand", "tasks"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown estimand 'tasks'; use population or these_tasks" in bad.stderr
    args = ["--tasks", "5", "--base-rate", "0.4", "--effect", "0.4", "--sims", "200"]
    printed = {
        e: subprocess.run([RIG, "power", *args, "--estimand", e], capture_output=True, text=True, timeout=300)
        for e in (POPULATION, THESE_TASKS)
    }
    for estimand, done in printed.items():
        assert done.returncode == 0 and f"estimand {estimand}" in done.stdout, done.stderr
    # With five tasks, a claim about tasks like these needs more runs than one about these five.
    reps = {e: int(done.stdout.split(": ")[1].split()[0]) for e, done in printed.items()}
    assert reps[POPULATION] > reps[THESE_TASKS]

"""The noise floor: `rig aa` end to end with the scripted harness, its analysis
(rig.analysis.noise) and the report's noise-floor and flakiness sections.

The A/B experiment is a copy of the committed small results set (tests/data/results_small/); `rig aa`
runs one of its arms twice, for real (workspaces, gates, hidden tests), into a folder beside it.
"""

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from rig.analysis import (
    POPULATION,
    THESE_TASKS,
    compare_success,
    copy_name,
    flakiness,
    load_runs,
    noise_floor,
    pass_column,
    power_success,
    stratified_test,
    two_runs,
)
from rig.analysis.noise import aa_arm, aa_name, false_positive_rate
from rig.analysis.power import min_detectable_effect, task_spread_for

DATA = Path(__file__).parent / "data"
SMALL = DATA / "results_small" / "results_small"
CONFIG = DATA / "results_small.toml"
RIG = str(Path(sys.executable).with_name("rig"))
ARM = "agents_md"
# One repetition per copy keeps the run short (5 tasks x 2 copies); the analysis is stated at the
# experiment's 3 repetitions.
AA_FOLDER = aa_name("results_small", ARM, 1)
SIMS = "100"


def _rig(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RIG_RESULTS_ROOT": str(root / "results"), "RIG_RUNS_ROOT": str(root / "runs")}
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results root holding a copy of the committed A/B, then `rig aa` of its arm agents_md."""
    base = tmp_path_factory.mktemp("aa")
    shutil.copytree(SMALL, base / "results" / "results_small")
    shutil.copy(CONFIG, base / "results_small.toml")
    proc = _rig(base, "aa", str(base / "results_small.toml"), "--arm", ARM, "--reps", "1", "--sims", SIMS)
    assert proc.returncode == 0, proc.stderr
    (base / "aa.stdout").write_text(proc.stdout)
    return base


def _points(value: float) -> str:
    return f"{value * 100:+.1f}"


def test_rig_aa_runs_the_arm_twice_beside_the_experiment_and_prints_its_noise_floor(root: Path) -> None:
    folder = root / "results" / AA_FOLDER
    design = json.loads((folder / "experiment.json").read_text())["experiment"]
    first, second = design["conditions"]
    assert (first["name"], second["name"]) == (ARM, "agents_md.again")
    assert {**second, "name": ARM} == first  # a copy in every setting but the name
    assert design["repetitions"] == 1 and design["stopping"] is None
    assert aa_arm(design, "results_small") == ARM
    records = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()]
    assert sorted(r["condition"] for r in records) == [ARM] * 5 + ["agents_md.again"] * 5

    df = load_runs(folder)
    c = compare_success(df, ARM, copy_name(ARM), POPULATION)
    lines = (root / "aa.stdout").read_text().splitlines()
    assert (
        lines[-4] == f"A/A of condition {ARM} of results_small: agents_md.again vs {ARM}, 5 tasks, 5 / 5 runs"
    )
    difference = lines[-3]
    assert difference.startswith(f"observed difference: {_points(c.effect)} pp, ")
    assert f"p = {c.p_value:.3g} ({c.test})" in difference
    assert re.match(
        r"false-positive rate: 0\.\d{3} \[0\.\d{3}, 0\.\d{3}\] of 100 simulated experiments "
        r"with no difference had p < 0\.05 \(each task at its rate pooled over both copies, "
        r"5 tasks x 3 runs per copy\)$",
        lines[-2],
    )
    assert re.match(
        r"minimal detectable effect: \d+\.\d pp at power 0\.8, alpha 0\.05, 5 tasks x 3 ", lines[-1]
    )


def test_rig_aa_resumes_and_its_json_is_the_analysis(root: Path) -> None:
    config = str(root / "results_small.toml")
    proc = _rig(root, "aa", config, "--arm", ARM, "--reps", "1", "--sims", SIMS, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "10 runs planned, 10 already recorded, 0 to run" in proc.stderr  # the runner's, resuming
    out = json.loads(proc.stdout)
    expected = noise_floor(
        load_runs(root / "results" / AA_FOLDER), ARM, copy_name(ARM), reps=3, n_sim=100, seed=0
    ).as_dict()
    assert out == {"experiment": "results_small", "results": [str(root / "results" / AA_FOLDER)], **expected}
    assert out["estimand"] == POPULATION and (out["n_tasks"], out["reps"]) == (5, 3)
    assert 0 <= out["fpr_low"] <= out["false_positive_rate"] <= out["fpr_high"] <= 1


def test_rig_aa_from_two_folders_reads_the_arm_of_each(root: Path) -> None:
    config = str(root / "results_small.toml")
    folders = [str(root / "results" / "results_small"), str(root / "results" / AA_FOLDER)]
    # The committed set was recorded by an older rig: pooling it with a new run is refused by default.
    refused = _rig(root, "aa", config, "--arm", ARM, "--from", *folders, "--sims", SIMS)
    assert refused.returncode == 2 and "cannot pool runs" in refused.stderr, refused.stderr
    proc = _rig(
        root, "aa", config, "--arm", ARM, "--from", *folders, "--sims", SIMS, "--allow-mixed-pins",
        "--json", "--estimand", THESE_TASKS,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    df = two_runs(folders, ARM, allow_mixed_pins=True)
    assert df.groupby("condition").size().to_dict() == {ARM: 15, "agents_md.again": 5}
    c = compare_success(df, ARM, copy_name(ARM), THESE_TASKS)
    assert (out["difference"]["n_a"], out["difference"]["n_b"]) == (15, 5)
    assert (out["difference"]["effect"], out["difference"]["p_value"]) == pytest.approx((c.effect, c.p_value))
    assert out["estimand"] == THESE_TASKS and out["results"] == folders


def test_rig_report_shows_the_noise_floor_and_the_flakiness(root: Path) -> None:
    proc = _rig(root, "report", str(root / "results_small.toml"))
    assert proc.returncode == 0, proc.stderr
    text = (root / "results" / "results_small" / "report.md").read_text()
    floor = noise_floor(load_runs(root / "results" / AA_FOLDER), ARM, copy_name(ARM), reps=3, n_sim=0)
    d = floor.difference
    ci = f"[{_points(d.ci_low)}, {_points(d.ci_high)}] pp"
    assert "### Noise floor (A/A)" in text
    assert (
        f"| `{ARM}` of `results_small` | `{AA_FOLDER}` | 5 / 5 | {_points(d.effect)} pp | {ci} | "
        f"{d.p_value:.3g} | {floor.mde * 100:.1f} pp |"
    ) in text
    # Beside the A/B's success effect, whose reference arm is the one run twice.
    ab = compare_success(load_runs(root / "results" / "results_small"), ARM, "no_agents_md")
    ab_ci = f"[{_points(ab.ci_low)}, {_points(ab.ci_high)}] pp"
    assert (
        f"| `no_agents_md` vs `{ARM}` | {_points(ab.effect)} pp | {ab_ci} "
        f"| `{ARM}` | {_points(d.effect)} pp {ci} | {floor.mde * 100:.1f} pp |"
    ) in text
    assert "### Flakiness per condition" in text
    table = flakiness(load_runs(root / "results" / "results_small")).set_index("condition")
    for arm in (ARM, "no_agents_md"):
        row = table.loc[arm]
        passes = " | ".join(f"{row[pass_column(k)] * 100:.1f}%" for k in (1, 2, 3))
        flips = f"{int(row['flipping'])} of 5 | {row['flip_rate'] * 100:.1f}%"
        assert f"| `{arm}` | 5 | 3 | {passes} | {flips} |" in text


def test_the_false_positive_rate_is_compare_success_on_every_simulated_experiment() -> None:
    # Analysing each distinct experiment once changes nothing: the same draws, each analysed by
    # compare_success in full, reject exactly as often.
    rates, n_a, n_b = np.array([0.2, 0.5, 0.7]), np.array([3, 4, 2]), np.array([3, 2, 4])
    for estimand in (POPULATION, THESE_TASKS):
        rate, low, high = false_positive_rate(rates, n_a, n_b, "a", "b", estimand=estimand, n_sim=80, seed=4)
        rng = np.random.default_rng(4)
        k_a = rng.binomial(n_a, rates, size=(80, 3))
        k_b = rng.binomial(n_b, rates, size=(80, 3))
        rejected = 0
        for ka, kb in zip(k_a, k_b, strict=True):
            rows = [
                {"task": t, "condition": arm, "success": i < k}
                for t in range(3)
                for arm, k, n in (("a", ka[t], n_a[t]), ("b", kb[t], n_b[t]))
                for i in range(n)
            ]
            rejected += compare_success(pd.DataFrame(rows), "a", "b", estimand).p_value < 0.05
        assert rate == rejected / 80
        assert low <= rate <= high


def test_the_false_positive_rate_of_the_exact_test_is_its_exact_size() -> None:
    # Two tasks at 50% and 30%, 6 runs per arm: enumerating every outcome gives the exact test's
    # true size (at most alpha: the test is exact; below it, by its discreteness at so few runs);
    # the simulation lands on it within its Monte Carlo interval.
    rates, n = np.array([0.5, 0.3]), 6
    laws = [sps.binom.pmf(np.arange(n + 1), n, r) for r in rates]
    size = 0.0
    for ka0, kb0, ka1, kb1 in itertools.product(range(n + 1), repeat=4):
        if stratified_test([ka0, ka1], [n, n], [kb0, kb1], [n, n])[0] < 0.05:
            size += laws[0][ka0] * laws[0][kb0] * laws[1][ka1] * laws[1][kb1]
    assert 0.01 < size <= 0.05
    runs = np.full(2, n)
    rate, low, high = false_positive_rate(
        rates, runs, runs, "a", "b", estimand=THESE_TASKS, n_sim=2000, seed=1
    )
    assert low <= size <= high and high - low < 0.015


def test_the_minimal_detectable_effect_is_where_power_reaches_the_target() -> None:
    mde = min_detectable_effect(0.3, 8, 4, n_sim=300, seed=2, estimand=POPULATION)
    power = lambda d: power_success(0.3, d, 8, 4, n_sim=300, seed=2, estimand=POPULATION)  # noqa: E731
    assert power(mde) >= 0.8 > power(mde - 0.03)
    # Above 50% the difference is searched downward, where there is room.
    above = min_detectable_effect(0.7, 8, 4, n_sim=300, seed=2)
    assert power_success(0.7, -above, 8, 4, n_sim=300, seed=2) >= 0.8
    # One task never gives a test over tasks: nothing is detectable.
    assert np.isnan(min_detectable_effect(0.5, 1, 4, n_sim=100))


def test_task_spread_for_inverts_the_task_model() -> None:
    rng = np.random.default_rng(0)
    for spread, base in ((0.5, 0.3), (1.5, 0.6)):
        z = rng.standard_normal(400_000)
        mu = np.log(base / (1 - base))
        rates = 1 / (1 + np.exp(-(mu + spread * z)))
        # Shift mu so the rates average `base` (the model's definition), then measure their variance.
        for _ in range(30):
            mu += (base - rates.mean()) * 4
            rates = 1 / (1 + np.exp(-(mu + spread * z)))
        assert task_spread_for(base, float(rates.var())) == pytest.approx(spread, abs=0.03)
    assert task_spread_for(0.4, 0.0) == 0.0
    assert task_spread_for(0.4, 0.24) == 4.0  # the largest variance rates averaging 0.4 can have


def test_only_an_arm_and_its_copy_make_an_aa_design() -> None:
    arm = {"name": "x", "remove_files": []}
    assert aa_arm({"name": "e-aa-x", "conditions": [arm, {**arm, "name": "x.again"}]}, "e") == "x"
    assert aa_arm({"name": "e-aa-x", "conditions": [arm, {**arm, "name": "y"}]}, "e") is None
    changed = {"name": "x.again", "remove_files": ["AGENTS.md"]}
    assert aa_arm({"name": "e-aa-x", "conditions": [arm, changed]}, "e") is None
    assert aa_arm({"name": "other-aa-x", "conditions": [arm, {**arm, "name": "x.again"}]}, "e") is None

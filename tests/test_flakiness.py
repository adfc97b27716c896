"""Flakiness per task (rig.analysis.flakiness): pass^k and the flip rate, by hand and on real runs."""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from rig.analysis import COLUMNS, binary_outcomes, flakiness, load_runs, pass_column, task_flakiness

SMALL = Path(__file__).parent / "data" / "results_small" / "results_small"


def _frame(outcomes: dict[tuple[str, str], list[int]]) -> pd.DataFrame:
    """One row per run: {(condition, task): [outcome of each run]}."""
    rows = [
        {"condition": condition, "task": task, "success": bool(value)}
        for (condition, task), values in outcomes.items()
        for value in values
    ]
    return pd.DataFrame(rows)


def test_pass_k_and_the_flip_rate_by_hand() -> None:
    df = _frame(
        {
            ("a", "t1"): [1, 1, 0, 1],  # c = 3 of n = 4: flips
            ("a", "t2"): [0, 0, 0],  # never passes
            ("a", "t3"): [1, 1, 1],  # always passes
            ("b", "t1"): [1, 0],  # flips
            ("b", "t2"): [1],  # run once: K = 1, and no flip to see
        }
    )
    per_task = task_flakiness(df)
    t1 = per_task[(per_task["condition"] == "a") & (per_task["task"] == "t1")].iloc[0]
    # C(3, k) / C(4, k): 3/4, 3/6, 1/4, 0/1.
    assert [t1[pass_column(k)] for k in range(1, 5)] == pytest.approx([0.75, 0.5, 0.25, 0.0])
    assert t1["flips"] and (t1["runs"], t1["successes"]) == (4, 3)
    t2 = per_task[(per_task["condition"] == "a") & (per_task["task"] == "t2")].iloc[0]
    assert math.isnan(t2[pass_column(4)])  # beyond its own 3 runs

    table = flakiness(df).set_index("condition")
    a, b = table.loc["a"], table.loc["b"]
    # K is the fewest runs of a task (3): every pass^k averages the same three tasks.
    assert (a["tasks"], a["runs"], a["k_max"]) == (3, 10, 3)
    assert [a[pass_column(k)] for k in (1, 2, 3)] == pytest.approx(
        [(0.75 + 0 + 1) / 3, (0.5 + 0 + 1) / 3, (0.25 + 0 + 1) / 3]
    )
    assert (a["flip_tasks"], a["flipping"], a["flip_rate"]) == (3, 1, pytest.approx(1 / 3))
    # The exact interval over tasks is Clopper-Pearson's, as statsmodels computes it.
    assert (a["flip_ci_low"], a["flip_ci_high"]) == pytest.approx(proportion_confint(1, 3, method="beta"))
    # b: one task run once, so K = 1 and its flip rate counts the one task run twice.
    assert (b["k_max"], b[pass_column(1)]) == (1, pytest.approx((0.5 + 1) / 2))
    assert math.isnan(b[pass_column(2)])
    assert (b["flip_tasks"], b["flipping"], b["flip_rate"]) == (1, 1, 1.0)
    assert (b["flip_ci_low"], b["flip_ci_high"]) == pytest.approx((0.025, 1.0))
    assert list(table.columns) == [
        "tasks", "runs", "k_max", "pass^1", "pass^2", "pass^3",
        "flip_tasks", "flipping", "flip_rate", "flip_ci_low", "flip_ci_high",
    ]  # fmt: skip


def test_pass_k_is_the_share_of_k_subsets_of_runs_that_all_passed() -> None:
    runs = [1, 0, 1, 1, 0, 1]
    df = _frame({("a", "t"): runs})
    row = task_flakiness(df).iloc[0]
    for k in range(1, len(runs) + 1):
        subsets = list(itertools.combinations(runs, k))
        assert row[pass_column(k)] == pytest.approx(sum(all(s) for s in subsets) / len(subsets))


def test_pass_k_is_unbiased_for_p_to_the_k() -> None:
    # Over the binomial law of c successes in n runs, the mean of the estimate is exactly p^k
    # (the plug-in (c / n)^k would overshoot it).
    n, p = 5, 0.3
    df = _frame({("a", f"c{c}"): [1] * c + [0] * (n - c) for c in range(n + 1)})
    per_task = task_flakiness(df)
    weights = sps.binom.pmf(per_task["successes"], n, p)
    for k in range(1, n + 1):
        assert float(np.dot(weights, per_task[pass_column(k)])) == pytest.approx(p**k)


def test_conditions_come_in_the_declared_order() -> None:
    df = _frame({("a", "t"): [1, 0], ("b", "t"): [1, 1]})
    df.attrs["conditions"] = ["b", "a"]
    assert flakiness(df)["condition"].tolist() == ["b", "a"]
    assert task_flakiness(df)["condition"].tolist() == ["b", "a"]


@pytest.mark.parametrize("values", [[1, 0.5], ["yes", "no"], [1.0, float("nan")], [1, 2]])
def test_a_non_binary_success_is_refused_as_binary_outcomes_refuses_it(values: list) -> None:
    df = pd.DataFrame({"condition": ["a", "a"], "task": ["t", "t"], "success": values})
    with pytest.raises(ValueError) as refused:
        binary_outcomes(df)
    for function in (flakiness, task_flakiness):
        with pytest.raises(ValueError) as caught:
            function(df)
        assert str(caught.value) == str(refused.value)


def test_a_frame_without_tasks_is_refused() -> None:
    with pytest.raises(ValueError, match="no column 'task'"):
        flakiness(pd.DataFrame({"condition": ["a"], "success": [True]}))


def test_flakiness_of_load_runs_frame_matches_the_records() -> None:
    # The committed results set, made by a scripted run: 5 tasks x 2 conditions x 3 repetitions.
    records = [json.loads(line) for line in (SMALL / "runs.jsonl").read_text().splitlines()]
    outcomes: dict[tuple[str, str], list[bool]] = {}
    for r in records:
        outcomes.setdefault((r["condition"], r["task"]), []).append(r["success"])
    df = load_runs(SMALL)
    before = df.copy()
    table = flakiness(df).set_index("condition")
    assert list(df.columns) == list(COLUMNS)  # load_runs' frame is left as it was
    pd.testing.assert_frame_equal(df, before)
    for condition in ("agents_md", "no_agents_md"):
        cells = {t: v for (c, t), v in outcomes.items() if c == condition}
        row = table.loc[condition]
        assert (row["tasks"], row["k_max"]) == (5, 3)
        flipping = sum(0 < sum(v) < len(v) for v in cells.values())
        assert (row["flipping"], row["flip_rate"]) == (flipping, pytest.approx(flipping / 5))
        for k in (1, 2, 3):
            expected = np.mean([math.comb(sum(v), k) / math.comb(len(v), k) for v in cells.values()])
            assert row[pass_column(k)] == pytest.approx(expected)
    # The committed set: agents_md flips on 3 of its 5 tasks, no_agents_md on 4.
    assert table["flipping"].tolist() == [3, 4]
    assert table.index.tolist() == df.attrs["conditions"]

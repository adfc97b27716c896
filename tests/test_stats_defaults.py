"""The statistics' defaults (#40 items 2 and 3): binary tests refuse fractional outcomes, a score is
compared as a clustered mean difference, metrics without data leave the Holm family, the reference
arm is named (never read off the row order), strata and clusters are separate, and the per-cell
table needs only the columns it shows, with a task-clustered pooled row.

Expected values are computed here independently of rig.analysis (loops over tasks, statsmodels'
clustered OLS, scipy's t law), so each test fails if the implementation drifts."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from rig.analysis import (
    EXACT_TEST,
    METRICS,
    SCORE,
    THESE_TASKS,
    WALD_TEST,
    arm_order,
    cell_table,
    clustered_mean_difference,
    compare_conditions,
    compare_metric,
    compare_score,
    compare_success,
    load_runs,
    newcombe_interval,
    pooled_rate_interval,
    stratified_test,
    success_interval,
    wilson_interval,
)

SMALL = Path(__file__).parent / "data" / "results_small" / "results_small"


def _success_frame(counts: dict[str, tuple[int, int, int, int]]) -> pd.DataFrame:
    """Runs of arms a and b: task -> (successes a, runs a, successes b, runs b)."""
    rows = []
    for task, (ka, na, kb, nb) in counts.items():
        rows += [(task, "a", i < ka) for i in range(na)]
        rows += [(task, "b", i < kb) for i in range(nb)]
    return pd.DataFrame(rows, columns=["task", "condition", "success"])


def _score_frame(scores: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    rows = [(task, arm, v) for (task, arm), vs in scores.items() for v in vs]
    frame = pd.DataFrame(rows, columns=["task", "condition", "score"])
    return frame.assign(success=frame["score"].ge(0.5))


def _cr1_by_hand(
    runs: list[tuple[object, str, float]], a: str = "a", b: str = "b"
) -> tuple[float, float, float, float]:
    """Pooled mean difference b - a over (cluster, arm, value) runs, its CR1 t interval and Wald p,
    computed with plain loops: linearisation per cluster, m / (m - 1) * sum of squares, t(m - 1)."""
    values = {arm: [v for _, x, v in runs if x == arm] for arm in (a, b)}
    total = {arm: len(vs) for arm, vs in values.items()}
    mean = {arm: sum(vs) / len(vs) for arm, vs in values.items()}
    clusters = list(dict.fromkeys(c for c, _, _ in runs))
    terms = []
    for cluster in clusters:
        term = 0.0
        for arm, sign in ((b, 1.0), (a, -1.0)):
            mine = [v for c, x, v in runs if c == cluster and x == arm]
            term += sign * (sum(mine) - len(mine) * mean[arm]) / total[arm]
        terms.append(term)
    m = len(clusters)
    se = math.sqrt(m / (m - 1) * sum(t * t for t in terms))
    diff = mean[b] - mean[a]
    half = sps.t.ppf(0.975, m - 1) * se
    return diff, diff - half, diff + half, float(2 * sps.t.sf(abs(diff) / se, m - 1))


# -- binary tests refuse what is not 0/1 ------------------------------------------------------


def test_fractional_success_is_refused_not_truncated() -> None:
    # The case: 0.5 against 0.9 used to come out as 0 against 0.9 -> 1 (effect 0.333, p = 1).
    df = pd.DataFrame(
        [
            (f"t{i}", arm, value)
            for i in range(3)
            for arm, value in (("a", 0.5), ("b", 0.9))
            for _ in range(3)
        ],
        columns=["task", "condition", "success"],
    )
    for call in (
        lambda: compare_success(df, "a", "b"),
        lambda: compare_conditions(df, reference="a", metrics=["success"]),
        lambda: cell_table(df),
    ):
        with pytest.raises(ValueError) as error:
            call()
        message = str(error.value)
        assert "\n" not in message
        assert message.startswith("column 'success' holds fractional values (e.g. 0.5)")
        assert "compare it as a score (metric 'score'" in message
    with pytest.raises(ValueError, match=r"^successes_a holds fractional values; .*metric 'score'"):
        stratified_test([1.5], [3], [2], [3])
    with pytest.raises(ValueError, match=r"^successes_b holds fractional values"):
        success_interval([1, 2], [3, 3], [2, 2.5], [3, 3])
    with pytest.raises(ValueError, match="fractional"):
        pooled_rate_interval([0.5, 1], [1, 1])


def test_other_non_binary_success_values_are_refused() -> None:
    base = _success_frame({"t0": (1, 3, 2, 3), "t1": (0, 3, 3, 3)})
    twos = base.assign(success=base["success"].astype(int) * 2)
    with pytest.raises(
        ValueError, match=r"^column 'success' holds values other than 0/1/True/False \(e.g. 2\)$"
    ):
        compare_success(twos, "a", "b")
    missing = base.assign(success=base["success"].astype(float).where(base.index != 0))
    with pytest.raises(ValueError, match=r"^column 'success' has 1 missing values"):
        compare_success(missing, "a", "b")
    words = base.assign(success=base["success"].map({True: "yes", False: "no"}))
    with pytest.raises(ValueError, match="values other than 0/1/True/False"):
        cell_table(words)


def test_every_binary_spelling_gives_the_same_result() -> None:
    base = _success_frame({"t0": (1, 4, 3, 4), "t1": (0, 3, 2, 3), "t2": (2, 5, 5, 5)})
    reference = compare_success(base, "a", "b")
    for spelling in (int, float, object):
        other = compare_success(base.assign(success=base["success"].astype(spelling)), "a", "b")
        assert other == reference
    assert stratified_test([1.0, 0.0], [4.0, 3.0], [3.0, 2.0], [4.0, 3.0]) == stratified_test(
        [1, 0], [4, 3], [3, 2], [4, 3]
    )


# -- the score: a fractional outcome with its own comparison ----------------------------------


def test_score_difference_is_the_hand_computed_cr1_interval_and_wald_test() -> None:
    scores = {
        ("t0", "a"): [0.2, 0.4, 0.1],
        ("t0", "b"): [0.5, 0.9],
        ("t1", "a"): [0.8, 1.0, 0.6, 0.7],
        ("t1", "b"): [0.9, 1.0, 1.0],
        ("t2", "a"): [0.0, 0.3],
        ("t2", "b"): [0.1, 0.2, 0.6, 0.4],
        ("t3", "a"): [0.5, 0.5, 0.45],
        ("t3", "b"): [0.55, 0.75, 0.7],
    }
    df = _score_frame(scores)
    c = compare_score(df, "a", "b")
    runs = [(task, arm, v) for (task, arm), vs in scores.items() for v in vs]
    diff, low, high, p = _cr1_by_hand(runs)
    assert (c.metric, c.a, c.b, c.effect_kind, c.test) == ("score", "a", "b", "difference", WALD_TEST)
    assert (c.effect, c.ci_low, c.ci_high, c.p_value) == pytest.approx((diff, low, high, p), rel=1e-12)
    assert (c.n_tasks, c.n_a, c.n_b, c.note) == (4, 12, 12, None)
    assert c.per_task[0] == {
        "task": "t0",
        "mean_a": pytest.approx(0.7 / 3),
        "n_a": 3,
        "mean_b": 0.7,
        "n_b": 2,
    }
    # The same as statsmodels' task-clustered OLS of the score on the arm, without its
    # (N - 1) / (N - 2) run-count factor (tasks are the units).
    import statsmodels.api as sm

    arm = (df["condition"] == "b").astype(float)
    fit = sm.OLS(df["score"], sm.add_constant(arm)).fit(cov_type="cluster", cov_kwds={"groups": df["task"]})
    se = float(fit.bse.iloc[1]) * math.sqrt((len(df) - 2) / (len(df) - 1))
    assert c.effect == pytest.approx(float(fit.params.iloc[1]))
    assert (c.ci_high - c.ci_low) / 2 == pytest.approx(sps.t.ppf(0.975, 3) * se)
    reverse = compare_score(df, "b", "a")
    assert reverse.effect == pytest.approx(-c.effect) and reverse.p_value == pytest.approx(c.p_value)


def test_a_binary_score_gets_the_success_difference_interval() -> None:
    counts = {"t0": (1, 5, 3, 6), "t1": (4, 6, 5, 6), "t2": (2, 4, 4, 5), "t3": (6, 8, 7, 8)}
    df = _success_frame(counts)
    df["score"] = df["success"].astype(float)
    score, success = compare_score(df, "a", "b"), compare_success(df, "a", "b")
    ka, na, kb, nb = (np.array(x) for x in zip(*counts.values(), strict=True))
    low, high = success_interval(ka, na, kb, nb)
    assert score.effect == pytest.approx(success.effect)
    assert (score.ci_low, score.ci_high) == pytest.approx((float(low), float(high)))
    assert (success.ci_low, success.ci_high) == pytest.approx((float(low), float(high)))


def test_score_interval_and_test_never_disagree() -> None:
    rng = np.random.default_rng(7)
    for tasks in (2, 3, 5, 12):
        n_a = rng.integers(1, 6, size=(3000, tasks))
        n_b = rng.integers(1, 6, size=(3000, tasks))
        sums_a = rng.uniform(0, 1, size=n_a.shape) * n_a
        sums_b = np.clip(rng.uniform(0, 1, size=n_b.shape) + 0.15, 0, 1) * n_b
        diff, low, high, p = clustered_mean_difference(sums_a, n_a, sums_b, n_b)
        excluded = (low > 0) | (high < 0)
        assert ((p < 0.05) == excluded).all()
        assert 0.02 < excluded.mean() < 0.98  # both outcomes occur: the check has teeth
        assert ((low <= diff) & (diff <= high)).all()


def test_score_a_a_experiments_reject_at_the_nominal_rate() -> None:
    rng = np.random.default_rng(11)
    sims = 4000
    for tasks, reps in ((5, 3), (10, 4)):
        mean = rng.beta(2, 2, size=(sims, tasks, 1))
        a = rng.beta(4 * mean, 4 * (1 - mean), size=(sims, tasks, reps))
        b = rng.beta(4 * mean, 4 * (1 - mean), size=(sims, tasks, reps))
        runs = np.full((sims, tasks), reps)
        p = clustered_mean_difference(a.sum(-1), runs, b.sum(-1), runs)[3]
        rate = float((p < 0.05).mean())
        se = math.sqrt(0.05 * 0.95 / sims)
        assert 0.05 - 4 * se < rate < 0.05 + 3 * se, (tasks, reps, rate)


def test_score_refuses_values_outside_the_unit_interval_and_drops_missing() -> None:
    df = _score_frame(
        {("t0", "a"): [0.2, 0.4], ("t0", "b"): [0.5, 0.6], ("t1", "a"): [0.1], ("t1", "b"): [0.3]}
    )
    for bad in (1.5, -0.1):
        wrong = df.assign(score=df["score"].where(df.index != 1, bad))
        with pytest.raises(
            ValueError, match=rf"^column 'score' holds values outside \[0, 1\] \(e.g. {bad:g}\)"
        ):
            compare_score(wrong, "a", "b")
    with pytest.raises(ValueError, match="holds non-numeric values"):
        compare_score(df.assign(score="half"), "a", "b")
    dropped = compare_score(df.assign(score=df["score"].where(df.index != 0)), "a", "b")
    assert dropped.n_a == 2 and "1 runs without score dropped" in str(dropped.note)
    assert dropped.effect == pytest.approx((0.5 + 0.6 + 0.3) / 3 - (0.4 + 0.1) / 2)


def test_score_degenerate_cases_have_no_interval_and_no_test() -> None:
    single = compare_score(_score_frame({("t0", "a"): [0.2, 0.4], ("t0", "b"): [0.5, 0.7]}), "a", "b")
    assert single.effect == pytest.approx(0.3)
    assert all(math.isnan(x) for x in (single.ci_low, single.ci_high, single.p_value))
    assert single.note == "a single task: no interval or test over tasks"
    same = _score_frame(
        {(f"t{i}", arm): [0.2 + 0.1 * i + (0.3 if arm == "b" else 0)] for i in range(3) for arm in "ab"}
    )
    flat = compare_score(same, "a", "b")
    assert flat.effect == pytest.approx(0.3) and math.isnan(flat.p_value)
    assert "the same difference in every task" in str(flat.note)
    none = compare_score(_score_frame({("t0", "a"): [0.2], ("t0", "b"): [math.nan]}), "a", "b")
    assert math.isnan(none.effect) and math.isnan(none.p_value) and none.note == "no score for b"


def test_compare_conditions_compares_a_score_column() -> None:
    df = _score_frame(
        {(f"t{i}", arm): [0.1 * i + (0.2 if arm == "b" else 0), 0.3] for i in range(4) for arm in "ab"}
    )
    metrics = [c.metric for c in compare_conditions(df, reference="a")]
    assert metrics == ["success", SCORE, *METRICS[1:]]
    assert SCORE not in [c.metric for c in compare_conditions(df.drop(columns="score"), reference="a")]


# -- metrics with no data leave the Holm family -----------------------------------------------


def test_absent_metrics_are_nan_and_do_not_inflate_holm() -> None:
    df = _success_frame({f"t{i}": (1, 6, 5, 6) for i in range(4)})
    comparisons = compare_conditions(df, reference="a")
    assert [c.metric for c in comparisons] == list(METRICS)
    success, *absent = comparisons
    assert 0 < success.p_value < 0.01
    assert success.p_adjusted == pytest.approx(success.p_value)  # a family of one, not five
    for c in absent:
        assert all(math.isnan(x) for x in (c.effect, c.ci_low, c.ci_high, c.p_value, c.p_adjusted))
        assert c.note == f"no {c.metric} column in the data"
    # All NaN counts as no data too, and only the metrics with a p-value are adjusted.
    df["cost_usd"] = np.nan
    df["wall_s"] = np.where(df["condition"] == "b", 2.0, 1.0) * (1 + df.index % 3)
    by_metric = {
        c.metric: c for c in compare_conditions(df, reference="a", metrics=["success", "cost_usd", "wall_s"])
    }
    assert math.isnan(by_metric["cost_usd"].p_value) and math.isnan(by_metric["cost_usd"].p_adjusted)
    assert by_metric["cost_usd"].note == "no cost reported for a and b"
    tested = [by_metric["success"].p_value, by_metric["wall_s"].p_value]
    expected = multipletests(tested, method="holm")[1]
    assert [by_metric["success"].p_adjusted, by_metric["wall_s"].p_adjusted] == pytest.approx(list(expected))


def test_no_shared_task_is_no_data() -> None:
    df = pd.DataFrame(
        [("t0", "a", True), ("t0", "a", False), ("t1", "b", True)], columns=["task", "condition", "success"]
    )
    c = compare_success(df, "a", "b")
    assert math.isnan(c.effect) and math.isnan(c.p_value) and c.note == "no task was run under both a and b"
    metric = compare_metric(df.assign(wall_s=1.0), "wall_s", "a", "b")
    assert math.isnan(metric.p_value) and metric.note == "no task has wall_s in both a and b"


# -- the reference is named, never the row order ----------------------------------------------


def _signature(comparisons: list) -> list[tuple[str, str, str, float]]:
    return [(c.metric, c.a, c.b, c.effect) for c in comparisons]


def test_reordering_rows_changes_no_effect_sign() -> None:
    df = load_runs(SMALL)
    assert df.attrs["conditions"] == ["agents_md", "no_agents_md"]
    expected = _signature(compare_conditions(df))
    assert expected[0][1:3] == ("agents_md", "no_agents_md") and expected[0][3] < 0
    reversed_rows = df.iloc[::-1]
    other_first = df.sort_values("condition", ascending=False, kind="stable")
    assert other_first["condition"].iloc[0] == "no_agents_md"  # the other arm's rows come first
    for reordered in (reversed_rows, other_first, df.sample(frac=1, random_state=4)):
        got = _signature(compare_conditions(reordered))
        assert [g[:3] for g in got] == [e[:3] for e in expected]
        assert [g[3] for g in got] == pytest.approx([e[3] for e in expected], nan_ok=True)
        assert [np.sign(g[3]) for g in got] == [np.sign(e[3]) for e in expected]


def test_a_frame_without_a_declared_order_needs_a_named_reference() -> None:
    df = _success_frame({"t0": (1, 5, 4, 5), "t1": (0, 5, 3, 5), "t2": (2, 5, 5, 5)})
    b_first = df.sort_values("condition", ascending=False, kind="stable")
    assert b_first["condition"].iloc[0] == "b"
    with pytest.raises(ValueError, match=r"^name the reference arm: .*the order of the rows is never used$"):
        compare_conditions(b_first, metrics=["success"])
    for kwargs in ({"reference": "a"}, {"conditions": ["a", "b"]}):
        for frame in (df, b_first):
            (c,) = compare_conditions(frame, metrics=["success"], **kwargs)  # type: ignore[arg-type]
            assert (c.a, c.b) == ("a", "b") and c.effect == pytest.approx(0.6)
    (flipped,) = compare_conditions(df, metrics=["success"], conditions=["b", "a"])
    assert (flipped.a, flipped.b) == ("b", "a") and flipped.effect == pytest.approx(-0.6)


def test_arm_order_follows_the_conditions_argument() -> None:
    df = pd.concat(
        [
            _success_frame({"t0": (1, 2, 2, 2)}),
            pd.DataFrame([("t0", "c", True)] * 2, columns=["task", "condition", "success"]),
        ]
    )
    assert arm_order(df, conditions=["c", "a", "b"]) == ["c", "a", "b"]
    assert arm_order(df, reference="b", conditions=["c", "a", "b"]) == ["b", "c", "a"]
    assert arm_order(df, reference="b") == ["b", "a", "c"]  # no declared order: the others by name
    assert [(c.a, c.b) for c in compare_conditions(df, metrics=["success"], conditions=["c", "a", "b"])] == [
        ("c", "a"),
        ("c", "b"),
    ]
    with pytest.raises(ValueError, match="conditions 'x' are not in the data"):
        arm_order(df, conditions=["a", "x"])
    with pytest.raises(ValueError, match="reference 'x' is not a condition"):
        arm_order(df, reference="x", conditions=["a", "b"])


# -- strata and clusters are separate ---------------------------------------------------------


def _pooled_configurations() -> tuple[pd.DataFrame, list[tuple[object, str, float]]]:
    """6 tasks x 2 configurations (groups), 4 runs per arm in each: the difference varies between
    tasks but is the same in both configurations of a task (a task effect the configurations share)."""
    differences = [3, -1, 2, 0, 4, -2]  # successes of b minus a, per task and configuration
    rows = []
    for t, d in enumerate(differences):
        for g, base in enumerate((0, 0)):
            ka = 1 + base if d >= 0 else 1 - d + base
            kb = ka + d
            rows += [(f"t{t}", f"g{g}", "a", i < ka) for i in range(4)]
            rows += [(f"t{t}", f"g{g}", "b", i < kb) for i in range(4)]
    df = pd.DataFrame(rows, columns=["task", "group", "condition", "success"])
    df["task_group"] = df["task"] + "/" + df["group"]
    return df, [
        (t, arm, float(s)) for t, arm, s in zip(df["task"], df["condition"], df["success"], strict=True)
    ]


def test_pooled_configurations_cluster_by_task_not_by_task_and_configuration() -> None:
    df, runs = _pooled_configurations()
    strata = ["task", "group"]
    by_task = compare_success(df, "a", "b", strata=strata, cluster="task")
    by_cell = compare_success(df, "a", "b", strata=strata, cluster="task_group")
    _, low, high, _ = _cr1_by_hand(runs)
    cell_runs = [(f"{t}/{g}", arm, s) for (t, arm, s), g in zip(runs, df["group"], strict=True)]
    _, cell_low, cell_high, _ = _cr1_by_hand(cell_runs)
    assert (by_task.ci_low, by_task.ci_high) == pytest.approx((low, high))
    assert (by_cell.ci_low, by_cell.ci_high) == pytest.approx((cell_low, cell_high))
    # Each task's two configurations are not independent evidence: clustering by task x
    # configuration halves the variance and takes t(11) for t(5), an interval 1.7x too narrow.
    assert (by_task.ci_high - by_task.ci_low) > 1.6 * (by_cell.ci_high - by_cell.ci_low)
    assert (by_task.n_tasks, by_cell.n_tasks) == (6, 12)
    # The population's test is its interval's own: it clusters as the interval does.
    for c in (by_task, by_cell):
        assert c.test == WALD_TEST and (c.p_value < 0.05) == (not c.ci_low <= 0 <= c.ci_high)
    assert by_task.p_value > by_cell.p_value
    # These tasks' exact test depends on the strata only, and conditions on each task x configuration.
    these = [
        compare_success(df, "a", "b", THESE_TASKS, strata=strata, cluster=c) for c in ("task", "task_group")
    ]
    assert these[0].p_value == these[1].p_value
    assert these[0].test == EXACT_TEST.replace("by task", "by task x group")
    assert [t["task"] for t in by_task.per_task][:2] == ["t0 / g0", "t0 / g1"]
    (passed,) = compare_conditions(df, reference="a", metrics=["success"], strata=strata, cluster="task")
    assert (passed.ci_low, passed.ci_high, passed.p_value) == (
        by_task.ci_low,
        by_task.ci_high,
        by_task.p_value,
    )


def test_the_test_stratifies_by_the_strata_columns_jointly() -> None:
    # Within each task, configuration g0 succeeds far more often than g1, and arm a ran mostly g0:
    # pooling the configurations of a task into one stratum confounds the arm with the configuration.
    rows = []
    for t in range(3):
        for group, (ka, na, kb, nb) in {"g0": (7, 8, 2, 2), "g1": (0, 2, 1, 8)}.items():
            rows += [(f"t{t}", group, "a", i < ka) for i in range(na)]
            rows += [(f"t{t}", group, "b", i < kb) for i in range(nb)]
    df = pd.DataFrame(rows, columns=["task", "group", "condition", "success"])
    joint = compare_success(df, "a", "b", THESE_TASKS, strata=["task", "group"])
    expected, _ = stratified_test([7, 0] * 3, [8, 2] * 3, [2, 1] * 3, [2, 8] * 3)
    assert joint.p_value == pytest.approx(expected, rel=1e-12)
    by_task = compare_success(df, "a", "b", THESE_TASKS)
    assert by_task.p_value == pytest.approx(
        stratified_test([7] * 3, [10] * 3, [3] * 3, [10] * 3)[0], rel=1e-12
    )
    assert by_task.p_value < 0.05 < joint.p_value  # the confounded test finds an effect that is not there
    assert compare_success(df, "a", "b", THESE_TASKS, strata="task", cluster="task") == by_task  # defaults
    with pytest.raises(ValueError, match=r"^strata column 'config' is not in the data"):
        compare_success(df, "a", "b", strata=["task", "config"])
    with pytest.raises(ValueError, match=r"^cluster column 'repo' is not in the data"):
        compare_success(df, "a", "b", cluster="repo")


# -- the per-cell table -----------------------------------------------------------------------


def test_cell_table_needs_only_task_condition_and_success() -> None:
    df = _success_frame({"t0": (1, 4, 3, 4), "t1": (2, 3, 3, 3), "t2": (0, 5, 4, 5)})
    table = cell_table(df)
    assert list(table.columns) == ["task", "condition", "n", "successes", "success_rate", "ci_low", "ci_high"]
    assert len(table) == 8
    with_some = cell_table(df.assign(wall_s=1.5, score=df["success"] * 0.5))
    assert list(with_some.columns) == [*table.columns, "mean_score", "median_wall_s"]
    cells = with_some.set_index(["task", "condition"])
    assert cells.loc[("t0", "b"), "mean_score"] == pytest.approx(3 * 0.5 / 4)
    assert cells.loc[("t1", "a"), ["ci_low", "ci_high"]].tolist() == pytest.approx(
        list(wilson_interval(2, 3))
    )


def test_cell_table_pooled_row_is_clustered_by_task() -> None:
    counts = {"t0": (1, 4, 3, 4), "t1": (3, 3, 3, 3), "t2": (0, 5, 4, 5), "t3": (2, 4, 4, 4)}
    df = _success_frame(counts)
    cells = cell_table(df).set_index(["task", "condition"])
    k = [c[0] for c in counts.values()]
    n = [c[1] for c in counts.values()]
    rate = sum(k) / sum(n)
    terms = [(kt - nt * rate) / sum(n) for kt, nt in zip(k, n, strict=True)]
    half = sps.t.ppf(0.975, 3) * math.sqrt(4 / 3 * sum(t * t for t in terms))
    row = cells.loc[("ALL", "a")]
    assert (row["n"], row["successes"]) == (16, 6)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((max(0.0, rate - half), min(1.0, rate + half)))
    assert (
        row["ci_high"] - row["ci_low"] > np.diff(wilson_interval(6, 16))[0]
    )  # wider than runs-as-independent
    # The row order and a repeated index (concat without ignore_index) change nothing.
    shuffled = pd.concat([df.iloc[::2], df.iloc[1::2]])
    again = cell_table(shuffled).set_index(["task", "condition"])
    assert again.loc[("ALL", "a")].tolist() == pytest.approx(row.tolist())
    # One task: the pooled row is that task's cell; the same rate everywhere: Wilson at the runs.
    single = cell_table(_success_frame({"t0": (2, 5, 4, 5)})).set_index(["task", "condition"])
    assert single.loc[("ALL", "a"), ["ci_low", "ci_high"]].tolist() == pytest.approx(
        list(wilson_interval(2, 5))
    )
    none = cell_table(_success_frame({"t0": (0, 3, 1, 3), "t1": (0, 4, 2, 4)})).set_index(
        ["task", "condition"]
    )
    assert none.loc[("ALL", "a"), ["ci_low", "ci_high"]].tolist() == pytest.approx(
        list(wilson_interval(0, 7))
    )


def test_these_tasks_interval_with_one_run_per_task_is_never_a_point() -> None:
    # Public per-task tables often hold one run per task and configuration: no task then says how
    # much its own runs vary. The interval of these tasks must not read that as certainty (it was
    # [-4.3, -4.3] pp on such a table): each run counts as a draw at the pooled rate, the Wilson
    # interval of independent runs, combined by Newcombe's method.
    rows = []
    for t in range(40):
        rows += [(f"t{t}", "a", t % 3 == 0), (f"t{t}", "b", t % 2 == 0)]
    df = pd.DataFrame(rows, columns=["task", "condition", "success"])
    c = compare_success(df, "a", "b", THESE_TASKS)
    ka, kb = sum(t % 3 == 0 for t in range(40)), sum(t % 2 == 0 for t in range(40))
    assert c.effect == pytest.approx(kb / 40 - ka / 40)
    assert (c.effect, c.ci_low, c.ci_high) == pytest.approx(newcombe_interval(ka, 40, kb, 40))
    assert c.ci_high - c.ci_low > 0.3


@pytest.mark.parametrize("runs", [(3, 4), (4, 5), (2, 3, 4)])
def test_a_pooled_interval_always_holds_its_own_rate_even_at_0_and_1(runs):
    # Wilson's formula at 7 or 9 runs of one outcome puts its bound a rounding error past the rate
    # (0.9999999999999999); the report draws rate - low and high - rate as error bars.
    for successes in ((0,) * len(runs), runs):
        rate = sum(successes) / sum(runs)
        low, high = pooled_rate_interval(successes, runs)
        assert low <= rate <= high
        assert (low, high)[rate == 1] == rate

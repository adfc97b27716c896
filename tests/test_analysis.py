"""The statistics layer: loading scored runs with their pins, cell tables, tests and intervals."""

import itertools
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from rig.analysis import (
    CMH_TEST,
    EXACT_TEST,
    POPULATION,
    THESE_TASKS,
    WALD_TEST,
    DuplicateRunWarning,
    PoolingError,
    cell_table,
    compare_conditions,
    compare_metric,
    compare_success,
    holm,
    infra_summary,
    load_runs,
    paired_median_test,
    population_test,
    stratified_test,
    success_interval,
    wilcoxon_min_p,
    wilson_interval,
)
from rig.analysis import stats as analysis_stats

SMALL = Path(__file__).parent / "data" / "results_small" / "results_small"

EXPECTED_COLUMNS = [
    "experiment", "run_id", "task", "condition", "repetition", "attempt", "success", "score", "group",
    "source", "failing_stage", "cost_usd", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens", "total_tokens", "tool_calls", "tool_errors", "metrics_complete",
    "main_model_tokens", "main_model_cost_usd", "other_models", "wall_s",
    "agent_wall_s",
    "timed_out", "stalled", "hang", "ran_check_script", "ran_pytest", "ran_tests", "read_docs",
    "read_agents_md", "read_skill", "tampered", "protected_touched", "bash_search_commands",
    "sealed", "tried_other_host", "out_of_scope", "compactions", "harness", "harness_version", "model",
    "thinking", "pack",
    "pack_hash", "fixture_hash", "task_hash", "hidden_tests_hash",
    "rig_version", "toolchain_hash", "environment_hash",
    "environment_packages", "python_version", "ruff_version", "pytest_version", "artifacts",
]  # fmt: skip

# Successes out of 3 per (task, condition) in the committed small set, read off runs.jsonl.
SMALL_SUCCESSES = {
    ("t1_fix_pagination", "agents_md"): 0,
    ("t1_fix_pagination", "no_agents_md"): 1,
    ("t2_add_endpoint", "agents_md"): 2,
    ("t2_add_endpoint", "no_agents_md"): 0,
    ("t3_fix_check", "agents_md"): 2,
    ("t3_fix_check", "no_agents_md"): 1,
    ("t4_split_constant", "agents_md"): 3,
    ("t4_split_constant", "no_agents_md"): 2,
    ("t5_migration", "agents_md"): 2,
    ("t5_migration", "no_agents_md"): 1,
}


# -- helpers ---------------------------------------------------------------------------------


def _records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines() if line]


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def _copy_small(tmp_path: Path, name: str = "results_small") -> Path:
    dest = tmp_path / name
    shutil.copytree(SMALL, dest)
    return dest


def _rename_experiment(folder: Path, name: str) -> None:
    records = _records(folder)
    for record in records:
        record["experiment"] = name
    _write_jsonl(folder / "runs.jsonl", records)
    design = json.loads((folder / "experiment.json").read_text())
    design["experiment"]["name"] = name
    (folder / "experiment.json").write_text(json.dumps(design))


def _success_frame(counts: dict[str, tuple[int, int, int, int]]) -> pd.DataFrame:
    """Runs of arms a and b: task -> (successes a, runs a, successes b, runs b)."""
    rows = []
    for task, (ka, na, kb, nb) in counts.items():
        rows += [(task, "a", i < ka) for i in range(na)]
        rows += [(task, "b", i < kb) for i in range(nb)]
    return pd.DataFrame(rows, columns=["task", "condition", "success"])


def _metric_frame(values: dict[tuple[str, str], list[float]], metric: str = "cost_usd") -> pd.DataFrame:
    rows = [(task, arm, v) for (task, arm), vs in values.items() for v in vs]
    return pd.DataFrame(rows, columns=["task", "condition", metric])


# -- load_runs -------------------------------------------------------------------------------


def test_load_small_set() -> None:
    df = load_runs(SMALL)
    assert len(df) == 30
    assert list(df.columns) == EXPECTED_COLUMNS
    assert list(dict.fromkeys(df["condition"])) == ["agents_md", "no_agents_md"]  # declared order
    assert set(df["experiment"]) == {"results_small"}
    assert df["success"].dtype == bool
    assert df["cost_usd"].dtype == np.float64
    counts = df.groupby(["task", "condition"])["success"].agg(["sum", "count"])
    for key, k in SMALL_SUCCESSES.items():
        assert (int(counts.loc[key, "sum"]), int(counts.loc[key, "count"])) == (k, 3)
    for row in df.itertuples():
        assert row.artifacts.is_absolute()
        assert (row.artifacts / "record.json").is_file()
        assert row.run_id == f"{row.task}__{row.condition}__r{row.repetition:02d}"
    as_text = load_runs(SMALL, paths=False)
    assert as_text["artifacts"].tolist() == [str(p) for p in df["artifacts"]]
    # Behaviour flags come from the session metrics: in this set only successful runs read AGENTS.md.
    assert df["read_docs"].all()
    assert not df["tampered"].any() and all(t == [] for t in df["protected_touched"])
    assert (df.loc[df["read_agents_md"], "condition"] == "agents_md").all()
    assert df["harness_version"].unique().tolist() == ["scripted-0.1.0"]
    assert df["agent_wall_s"].lt(df["wall_s"]).all()


def test_artifacts_are_normalised_below_the_folder(tmp_path: Path) -> None:
    """Whatever relative path a record names, `artifacts` is os.path.normpath of it below the folder."""
    folder = tmp_path / "results_small"
    shutil.copytree(SMALL, folder)
    odd = ["runs/a/attempt-1", "runs//b/attempt-1", "runs/./c/", "runs/../d", "", "/elsewhere/x", "..e/f"]
    lines = (folder / "runs.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines[: len(odd)]]
    for record, rel in zip(records, odd, strict=True):
        record["artifacts"] = rel
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    df = load_runs(folder)
    got = dict(zip(df["run_id"], df["artifacts"], strict=True))
    root = folder.resolve()
    for record, rel in zip(records, odd, strict=True):
        assert got[record["run_id"]] == Path(os.path.normpath(os.path.join(root, rel)))


def test_load_reads_flags_from_records(tmp_path: Path) -> None:
    folder = _copy_small(tmp_path)
    records = _records(folder)
    records[0]["metrics"]["cost_usd"] = None
    records[0]["protected"]["modified"] = ["scripts/check.py"]
    records[0]["protected"]["added"] = ["tests/conftest.py"]
    records[0]["metrics"]["bash_search_commands"] = ["grep -rn x .", "rg y"]
    records[0]["metrics"]["docs_read"] = []
    _write_jsonl(folder / "runs.jsonl", records)
    df = load_runs(folder).set_index("run_id")
    row = df.loc[records[0]["run_id"]]
    assert np.isnan(row["cost_usd"])
    assert row["tampered"] and row["protected_touched"] == ["scripts/check.py", "tests/conftest.py"]
    assert row["bash_search_commands"] == 2
    assert not row["read_docs"] and not row["read_agents_md"]


def test_load_skips_torn_last_line(tmp_path: Path) -> None:
    folder = _copy_small(tmp_path)
    with (folder / "runs.jsonl").open("a") as f:
        f.write('{"experiment": "results_small", "run_id": "t1_fix')
    assert len(load_runs(folder)) == 30


def test_load_empty_or_missing_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "runs.jsonl").write_text("")
    with pytest.raises(ValueError, match="no scored runs"):
        load_runs(empty)
    with pytest.raises(ValueError, match="no such directory"):
        load_runs(tmp_path / "missing")


@pytest.mark.parametrize(
    ("field", "where"),
    [
        (pin, "within task 't2_add_endpoint'")
        for pin in (
            "task_hash",
            "hidden_tests_hash",
            "fixture_hash",
            "environment_hash",
            "environment_packages",
            "python_version",
            "ruff_version",
            "pytest_version",
        )
    ],
)
def test_pooling_error_on_task_pins(tmp_path: Path, field: str, where: str) -> None:
    folder = _copy_small(tmp_path)
    records = _records(folder)
    target = next(r for r in records if r["task"] == "t2_add_endpoint")
    target["pins"][field] = "f" * 64
    _write_jsonl(folder / "runs.jsonl", records)
    with pytest.raises(PoolingError) as info:
        load_runs(folder)
    message = str(info.value)
    assert "\n" not in message
    assert field in message and where in message and "'ffffffffffff...'" in message
    assert message.endswith("pass --allow-mixed-pins to pool them anyway")
    assert len(load_runs(folder, allow_mixed_pins=True)) == 30


def test_pooling_error_on_harness_version_within_an_arm(tmp_path: Path) -> None:
    folder = _copy_small(tmp_path)
    records = _records(folder)
    target = next(r for r in records if r["condition"] == "agents_md")
    target["harness_version"] = target["pins"]["harness_version"] = "scripted-0.2.0"
    _write_jsonl(folder / "runs.jsonl", records)
    with pytest.raises(
        PoolingError, match=r"harness_version differs within condition 'agents_md'.*'scripted-0.2.0'"
    ):
        load_runs(folder)
    assert len(load_runs(folder, allow_mixed_pins=True)) == 30


@pytest.mark.parametrize(
    ("pin", "value"),
    [
        ("rig_version", "0.1.0+g0123456789ab"),
        ("toolchain_hash", "e" * 64),
    ],
)
def test_pooling_error_on_the_judge(tmp_path: Path, pin: str, value: str) -> None:
    """The rig's own code and the verifying toolchain must be one for every run, across arms too."""
    folder = _copy_small(tmp_path)
    records = _records(folder)
    for record in records[:4]:
        record["pins"][pin] = value
    _write_jsonl(folder / "runs.jsonl", records)
    with pytest.raises(PoolingError) as info:
        load_runs(folder)
    message = str(info.value)
    assert "\n" not in message
    assert f"{pin} differs across the runs" in message and "(4 runs" in message and "(26 runs" in message
    assert repr(value)[:13] in message and message.endswith("pass --allow-mixed-pins to pool them anyway")
    df = load_runs(folder, allow_mixed_pins=True)
    assert len(df) == 30 and df[pin].nunique(dropna=False) == 2


def test_duplicate_run_ids_are_dropped_and_reported(tmp_path: Path) -> None:
    folder = _copy_small(tmp_path)
    records = _records(folder)
    first = records[0]
    assert not first["success"]
    # A second writer appended the same run twice more, with another verdict: the first record counts.
    duplicates = [{**first, "success": True}, {**first, "success": True, "attempt": 2}]
    _write_jsonl(folder / "runs.jsonl", [*records, *duplicates, {**records[1], "success": True}])
    with pytest.warns(DuplicateRunWarning) as caught:
        df = load_runs(folder)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert str(folder / "runs.jsonl") in message and "dropped 3 duplicate records of 2 run ids" in message
    assert f"{first['run_id']} (+2)" in message and f"{records[1]['run_id']} (+1)" in message
    assert len(df) == 30 and df["run_id"].is_unique
    assert not df.set_index("run_id").loc[first["run_id"], "success"]
    assert infra_summary(folder)["quarantined"].sum() == 0


def test_pooling_error_on_fixture_across_experiments(tmp_path: Path) -> None:
    first = _copy_small(tmp_path, "one")
    second = _copy_small(tmp_path, "two")
    _rename_experiment(second, "results_small_b")
    records = _records(second)
    for record in records:
        record["pins"]["fixture_hash"] = "0" * 64
    _write_jsonl(second / "runs.jsonl", records)
    with pytest.raises(PoolingError, match="fixture_hash differs within task"):
        load_runs([first, second], arm_by_experiment=True)


def test_tasks_of_their_own_trees_pool(tmp_path: Path) -> None:
    """A task mined at its fix's parent starts from its base, in its base's environment: its
    runs pin their own starting tree and environment, one for every run of that task."""
    folder = _copy_small(tmp_path)
    records = _records(folder)
    for record in records:
        if record["task"] == "t2_add_endpoint":
            record["pins"] |= {
                "fixture_hash": "b" * 64,
                "environment_hash": "c" * 64,
                "pytest_version": "8.4.2",
            }
    _write_jsonl(folder / "runs.jsonl", records)
    df = load_runs(folder)
    assert len(df) == 30 and df["fixture_hash"].nunique() == 2


def test_arm_by_experiment(tmp_path: Path) -> None:
    first = _copy_small(tmp_path, "one")
    second = _copy_small(tmp_path, "two")
    _rename_experiment(second, "results_small_b")
    # Another harness version in the other experiment: a different arm, so poolable as arms...
    records = _records(second)
    for record in records:
        record["harness_version"] = record["pins"]["harness_version"] = "scripted-0.2.0"
    _write_jsonl(second / "runs.jsonl", records)
    df = load_runs([first, second], arm_by_experiment=True)
    assert len(df) == 60
    assert list(dict.fromkeys(df["condition"])) == ["results_small", "results_small_b"]
    assert (df["condition"] == df["experiment"]).all()
    comparisons = compare_conditions(df, metrics=["success"])
    assert [(c.a, c.b) for c in comparisons] == [("results_small", "results_small_b")]
    assert comparisons[0].effect == 0.0 and comparisons[0].p_value == 1.0  # the same runs twice
    # ...but not when conditions of both experiments are pooled by name.
    with pytest.raises(PoolingError, match="harness_version"):
        load_runs([first, second])
    with pytest.raises(ValueError, match="two different experiments"):
        load_runs([first, _copy_small(tmp_path, "three")], arm_by_experiment=True)
    with pytest.raises(ValueError, match="given twice"):
        load_runs([first, first])


def test_infra_summary(tmp_path: Path) -> None:
    base = _records(SMALL)[0]

    def record(run_id: str, task: str, condition: str, attempt: int = 1) -> dict[str, Any]:
        r = json.loads(json.dumps(base))
        r.update(run_id=run_id, task=task, condition=condition, attempt=attempt)
        return r

    folder = tmp_path / "exp"
    folder.mkdir()
    _write_jsonl(
        folder / "runs.jsonl",
        [
            record("t1__a__r01", "t1", "a"),
            record("t1__a__r02", "t1", "a", attempt=3),  # scored after two infra failures
            record("t1__b__r01", "t1", "b"),
        ],
    )
    infra = [record("t1__a__r02", "t1", "a", attempt=n) for n in (1, 2)]
    infra += [record("t1__b__r02", "t1", "b", attempt=n) for n in (1, 2, 3)]  # never scored
    infra += [record("t2__a__r01", "t2", "a")]  # a cell with nothing scored at all
    for r in infra:
        r["infra"] = {"is_infra": True, "rule": "no_model_turn", "detail": None}
    _write_jsonl(folder / "quarantine.jsonl", infra)
    summary = infra_summary(folder)
    assert list(summary.columns) == ["experiment", "task", "condition", "infra_reruns", "quarantined"]
    got = {(r.task, r.condition): (r.infra_reruns, r.quarantined) for r in summary.itertuples()}
    assert got == {("t1", "a"): (2, 0), ("t1", "b"): (3, 1), ("t2", "a"): (1, 1)}
    assert set(summary["experiment"]) == {"results_small"}
    clean = infra_summary(SMALL)
    assert len(clean) == 10 and clean["infra_reruns"].sum() == 0 and clean["quarantined"].sum() == 0


# -- intervals and cells ---------------------------------------------------------------------


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_wilson_interval_matches_statsmodels(confidence: float) -> None:
    for k, n in [(0, 1), (1, 1), (0, 3), (1, 3), (2, 3), (3, 3), (5, 15), (9, 15), (37, 100), (100, 100)]:
        expected = proportion_confint(k, n, alpha=1 - confidence, method="wilson")
        assert wilson_interval(k, n, confidence) == pytest.approx(expected, abs=1e-12)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    with pytest.raises(ValueError):
        wilson_interval(4, 3)


def test_cell_table_small_set() -> None:
    table = cell_table(load_runs(SMALL))
    assert list(table.columns) == [
        "task", "condition", "n", "successes", "success_rate", "ci_low", "ci_high",
        "median_cost_usd", "median_total_tokens", "median_tool_calls", "median_wall_s", "incomplete_metrics",
    ]  # fmt: skip
    assert len(table) == 12 and table["incomplete_metrics"].eq(0).all()
    cells = table.set_index(["task", "condition"])
    for key, k in SMALL_SUCCESSES.items():
        row = cells.loc[key]
        assert (row["n"], row["successes"]) == (3, k)
        assert row["success_rate"] == pytest.approx(k / 3)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(wilson_interval(k, 3))
    assert list(table["task"].iloc[-2:]) == ["ALL", "ALL"]
    total_a, total_b = cells.loc[("ALL", "agents_md")], cells.loc[("ALL", "no_agents_md")]
    assert (total_a["n"], total_a["successes"]) == (15, 9)
    assert (total_b["n"], total_b["successes"]) == (15, 5)
    # The ALL row's interval is clustered by task (runs of a task are not independent): successes
    # 0, 2, 2, 3, 2 of 3, P = 0.6, linearisation (k_t - 3 P) / 15, CR1 variance 5/4 * 4.8 / 225,
    # t(4) quantile 2.776: 0.6 -/+ 0.4534, clipped at 1 (the Wilson interval of 9/15 runs as if
    # independent was [0.357, 0.802]).
    assert (total_a["ci_low"], total_a["ci_high"]) == pytest.approx((0.146608, 1.0), abs=1e-6)
    # The scripted harness bills 0.0042 USD / 4300 tokens / 1 tool call for a run that does nothing
    # and 0.0084 / 8600 / 3 for one that applies the solution.
    assert total_a["median_cost_usd"] == pytest.approx(0.0084)
    assert total_b["median_cost_usd"] == pytest.approx(0.0042)
    assert cells.loc[("t1_fix_pagination", "agents_md"), "median_total_tokens"] == 4300
    assert cells.loc[("t4_split_constant", "no_agents_md"), "median_tool_calls"] == 3
    assert cells.loc[("t1_fix_pagination", "agents_md"), "median_wall_s"] == pytest.approx(1.324)
    assert total_a["median_wall_s"] == pytest.approx(1.7)


def test_cell_table_ignores_missing_cost() -> None:
    df = load_runs(SMALL)
    df.loc[df["condition"] == "no_agents_md", "cost_usd"] = np.nan
    cells = cell_table(df).set_index(["task", "condition"])
    assert np.isnan(cells.loc[("ALL", "no_agents_md"), "median_cost_usd"])
    assert cells.loc[("ALL", "agents_md"), "median_cost_usd"] == pytest.approx(0.0084)


# -- multiple comparisons --------------------------------------------------------------------


def test_holm_matches_statsmodels() -> None:
    rng = np.random.default_rng(3)
    cases = [
        [0.01, 0.04, 0.03, 0.2],
        [0.5, 0.5, 0.01, 0.01, 0.9],
        [0.001],
        [0.3, 0.6, 0.9],
        list(rng.uniform(0, 0.1, 12)),
    ]
    for pvalues in cases:
        expected = multipletests(pvalues, method="holm")[1]
        assert holm(pvalues) == pytest.approx(list(expected), abs=1e-12)
    assert holm([]) == []
    adjusted = holm([0.2, float("nan"), 0.01])
    assert adjusted[0] == pytest.approx(0.2) and np.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.02)


# -- the success test ------------------------------------------------------------------------


def test_exact_conditional_test_single_stratum_by_hand() -> None:
    # a 1/5, b 5/5: 6 successes in 10 runs; arm b's count is hypergeometric on 1..5 with weights
    # C(6,x) C(4,5-x) = 6, 60, 120, 60, 6 (out of 252). The observed x = 5 and the equally
    # unlikely x = 1 make up the two-sided p-value.
    p, test = stratified_test([1], [5], [5], [5])
    assert test == EXACT_TEST
    assert p == pytest.approx(12 / 252, rel=1e-12)
    assert p == pytest.approx(sps.fisher_exact([[5, 0], [1, 4]]).pvalue, rel=1e-12)


def test_exact_conditional_test_equals_fisher_for_one_stratum() -> None:
    for ka, na, kb, nb in itertools.product(range(0, 7, 2), [6], range(0, 9, 3), [8]):
        p, _ = stratified_test([ka], [na], [kb], [nb])
        expected = sps.fisher_exact([[kb, nb - kb], [ka, na - ka]]).pvalue
        assert p == pytest.approx(expected, rel=1e-9, abs=1e-15), (ka, na, kb, nb)


def test_exact_conditional_test_two_strata_by_enumeration() -> None:
    # Brute force the conditional null law of arm b's total over every pair of per-task outcomes.
    ka, na, kb, nb = [0, 1], [4, 5], [4, 4], [5, 6]
    laws = []
    for a_succ, a_n, b_succ, b_n in zip(ka, na, kb, nb, strict=True):
        m = a_succ + b_succ
        support = range(max(0, m - a_n), min(b_n, m) + 1)
        laws.append({x: sps.hypergeom.pmf(x, a_n + b_n, m, b_n) for x in support})
    total: dict[int, float] = {}
    for (x1, p1), (x2, p2) in itertools.product(laws[0].items(), laws[1].items()):
        total[x1 + x2] = total.get(x1 + x2, 0.0) + p1 * p2
    observed = total[sum(kb)]
    expected = sum(q for q in total.values() if q <= observed * (1 + 1e-7))
    p, _ = stratified_test(ka, na, kb, nb)
    assert p == pytest.approx(expected, rel=1e-12)
    assert 0 < p < 0.05


def test_constant_strata_carry_no_information() -> None:
    with_constant, _ = stratified_test([1, 5, 0], [5, 5, 5], [5, 5, 0], [5, 5, 5])
    alone, _ = stratified_test([1], [5], [5], [5])
    assert with_constant == pytest.approx(alone)
    assert stratified_test([5, 0], [5, 5], [5, 0], [5, 5])[0] == 1.0


def test_cmh_for_huge_experiments(monkeypatch: pytest.MonkeyPatch) -> None:
    ka, na, kb, nb = [80, 120, 60], [200, 200, 200], [95, 130, 75], [200, 200, 200]
    exact, _ = stratified_test(ka, na, kb, nb)
    cmh, name = stratified_test(ka, na, kb, nb, method="cmh")
    assert name == CMH_TEST
    assert cmh == pytest.approx(exact, rel=0.05)  # large counts: the asymptotic test agrees
    monkeypatch.setattr(analysis_stats, "EXACT_MAX_SUPPORT", 100)
    assert stratified_test(ka, na, kb, nb) == (cmh, CMH_TEST)


def test_compare_success_clear_effect() -> None:
    df = _success_frame({f"t{i}": (1, 10, 9, 10) for i in range(5)})
    c = compare_success(df, "a", "b")
    assert (c.metric, c.a, c.b, c.effect_kind) == ("success", "a", "b", "difference")
    assert c.effect == pytest.approx(0.8)
    assert 0 < c.ci_low <= c.effect <= c.ci_high
    assert c.p_value < 1e-6 and c.test == EXACT_TEST
    assert (c.n_tasks, c.n_a, c.n_b) == (5, 50, 50)
    assert c.per_task[0] == {
        "task": "t0",
        "successes_a": 1,
        "n_a": 10,
        "successes_b": 9,
        "n_b": 10,
        "fisher_p": pytest.approx(sps.fisher_exact([[9, 1], [1, 9]]).pvalue),
    }
    reverse = compare_success(df, "b", "a")
    assert reverse.effect == pytest.approx(-0.8) and reverse.p_value == pytest.approx(c.p_value)
    assert compare_success(df, "a", "b") == c  # no resampling: the same data, the same interval


def test_compare_success_identical_arms() -> None:
    df = _success_frame({"t0": (5, 10, 5, 10), "t1": (2, 10, 2, 10), "t2": (9, 10, 9, 10)})
    c = compare_success(df, "a", "b")
    assert c.effect == 0.0
    assert c.ci_low < 0 < c.ci_high
    assert c.p_value == pytest.approx(1.0)
    constant = compare_success(_success_frame({"t0": (10, 10, 10, 10)}), "a", "b")
    assert constant.p_value == 1.0 and constant.note and "no information" in constant.note


def test_compare_success_uses_only_tasks_in_both_arms() -> None:
    df = _success_frame({"t0": (1, 10, 9, 10), "t1": (2, 10, 8, 10)})
    extra = pd.DataFrame([("t2", "a", False)] * 10, columns=["task", "condition", "success"])
    c = compare_success(pd.concat([df, extra]), "a", "b")
    assert c.n_tasks == 2 and c.n_a == 20 and [t["task"] for t in c.per_task] == ["t0", "t1"]
    with pytest.raises(ValueError, match="'c' is not in the data"):
        compare_success(df, "a", "c")


def test_success_interval_is_statsmodels_cluster_robust_ols() -> None:
    # Unbalanced on purpose: the pooled difference is the OLS slope of success on the arm, and
    # the tasks-as-sampled interval is its task-clustered sandwich with t(tasks - 1), without
    # statsmodels' (N - 1) / (N - 2) run-count factor.
    import statsmodels.api as sm

    ka, na, kb, nb = [1, 4, 2, 6], [5, 6, 4, 8], [3, 5, 4, 7], [6, 6, 5, 8]
    rows = [
        (t, arm, r < k)
        for t, counts in enumerate(zip(ka, na, kb, nb, strict=True))
        for arm, k, n in ((0, counts[0], counts[1]), (1, counts[2], counts[3]))
        for r in range(n)
    ]
    df = pd.DataFrame(rows, columns=["task", "arm", "success"])
    fit = sm.OLS(df["success"].astype(float), sm.add_constant(df["arm"].astype(float))).fit(
        cov_type="cluster", cov_kwds={"groups": df["task"]}, use_t=True
    )
    runs = len(df)
    se = float(fit.bse["arm"]) * np.sqrt((runs - 2) / (runs - 1))
    half = sps.t.ppf(0.975, len(ka) - 1) * se
    low, high = success_interval(ka, na, kb, nb)
    assert (float(low), float(high)) == pytest.approx((fit.params["arm"] - half, fit.params["arm"] + half))
    these_low, these_high = success_interval(ka, na, kb, nb, "these_tasks")
    assert these_low < fit.params["arm"] < these_high
    assert all(np.isnan(success_interval([1], [5], [3], [5])))
    with pytest.raises(ValueError, match="unknown estimand"):
        success_interval(ka, na, kb, nb, "everything")


# -- the metric comparison -------------------------------------------------------------------


def test_compare_metric_ratio_of_medians() -> None:
    values: dict[tuple[str, str], list[float]] = {}
    for i in range(6):
        scale = 1.0 + i  # tasks differ in cost; b costs half of a in every task
        values[(f"t{i}", "a")] = [scale * x for x in (1.0, 2.0, 3.0)]
        values[(f"t{i}", "b")] = [scale * x / 2 for x in (1.0, 2.0, 3.0)]
    df = _metric_frame(values)
    c = compare_metric(df, "cost_usd", "a", "b")
    pooled_a = np.median([v for (_, arm), vs in values.items() if arm == "a" for v in vs])
    pooled_b = np.median([v for (_, arm), vs in values.items() if arm == "b" for v in vs])
    assert c.effect_kind == "ratio" and c.effect == pytest.approx(pooled_b / pooled_a) == pytest.approx(0.5)
    assert c.ci_low <= 0.5 <= c.ci_high < 1
    # Every task lower, distinct magnitudes: the most extreme outcome of 6 pairs, 2 / 2**6.
    assert c.p_value == pytest.approx(2 / 2**6) and c.test.startswith("Wilcoxon")
    assert c.per_task[1] == {"task": "t1", "median_a": 4.0, "median_b": 2.0, "n_a": 3, "n_b": 3}
    assert (c.n_tasks, c.n_a, c.n_b, c.note) == (6, 18, 18, None)


def test_compare_metric_missing_values_and_degenerate_cases() -> None:
    values = {(f"t{i}", arm): [1.0, 2.0, 3.0] for i in range(3) for arm in ("a", "b")}
    df = _metric_frame(values)
    same = compare_metric(df, "cost_usd", "a", "b")
    assert same.effect == 1.0 and same.p_value == 1.0 and "equal in every task" in same.note
    df.loc[(df["condition"] == "b") & (df["task"] == "t0"), "cost_usd"] = np.nan
    dropped = compare_metric(df, "cost_usd", "a", "b")
    assert dropped.n_tasks == 2 and dropped.n_b == 6 and "3 runs without cost dropped" in dropped.note
    df.loc[df["condition"] == "b", "cost_usd"] = np.nan
    none = compare_metric(df, "cost_usd", "a", "b")
    assert np.isnan(none.effect) and np.isnan(none.p_value) and none.note == "no cost reported for b"
    one_task = _metric_frame({("t0", "a"): [1.0, 2.0], ("t0", "b"): [3.0, 4.0]}, "wall_s")
    single = compare_metric(one_task, "wall_s", "a", "b")
    assert (
        single.effect == pytest.approx(3.5 / 1.5) and single.p_value == 1.0 and "fewer than 2" in single.note
    )
    few = compare_metric(load_runs(SMALL), "wall_s", "agents_md", "no_agents_md")
    assert "cannot reach p < 0.05" in few.note
    with pytest.raises(ValueError, match="unknown metric"):
        compare_metric(df, "dollars", "a", "b")


def test_paired_median_test_rows_are_independent() -> None:
    rows = np.array([[1.0, -2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 1.0, 2.0, 0.0, 3.0, 4.0], [0.0] * 6])
    batch = paired_median_test(rows)
    single = [float(paired_median_test(row)[0]) for row in rows]
    assert batch == pytest.approx(single)
    assert batch[0] == pytest.approx(sps.wilcoxon(rows[0]).pvalue) and batch[2] == 1.0
    assert wilcoxon_min_p(5) == 0.0625 and wilcoxon_min_p(6) == 0.03125
    assert paired_median_test(-np.arange(1.0, 6.0))[0] == pytest.approx(wilcoxon_min_p(5))


# -- all comparisons of a report -------------------------------------------------------------


def test_compare_conditions_small_set() -> None:
    df = load_runs(SMALL)
    comparisons = compare_conditions(df)
    assert [c.metric for c in comparisons] == ["success", "cost_usd", "total_tokens", "tool_calls", "wall_s"]
    assert all((c.a, c.b) == ("agents_md", "no_agents_md") for c in comparisons)
    assert [c.p_adjusted for c in comparisons] == pytest.approx(holm([c.p_value for c in comparisons]))
    success = comparisons[0]
    assert success.effect == pytest.approx(5 / 15 - 9 / 15)
    assert success.ci_low < success.effect < success.ci_high
    assert 0 < success.p_value < 1 and success.n_tasks == 5
    tasks = sorted({t for t, _ in SMALL_SUCCESSES})
    counts = (
        [SMALL_SUCCESSES[(t, "agents_md")] for t in tasks],
        [3] * 5,
        [SMALL_SUCCESSES[(t, "no_agents_md")] for t in tasks],
        [3] * 5,
    )
    # The default question is the population's: the Wald t-test of the interval's own estimand.
    assert (success.estimand, success.test) == (POPULATION, WALD_TEST)
    assert success.p_value == pytest.approx(population_test(*counts))
    assert (success.p_value < 0.05) == (not success.ci_low <= 0 <= success.ci_high)
    these = compare_conditions(df, metrics=["success"], estimand=THESE_TASKS)[0]
    assert (these.estimand, these.test) == (THESE_TASKS, EXACT_TEST)
    assert these.p_value == pytest.approx(stratified_test(*counts)[0]) != success.p_value
    assert these.effect == success.effect and these.ci_high - these.ci_low < success.ci_high - success.ci_low
    cost = comparisons[1]
    assert cost.effect == pytest.approx(0.5) and cost.effect_kind == "ratio"
    flipped = compare_conditions(df, reference="no_agents_md", metrics=["success"])
    assert flipped[0].effect == pytest.approx(-success.effect) and flipped[0].p_adjusted == flipped[0].p_value
    with pytest.raises(ValueError, match="reference 'x'"):
        compare_conditions(df, reference="x")

"""`rig import harbor`: Harbor job folders written by Harbor's own result models (0.26.0, the newest,
and 0.1.25, whose result format differs; tests/data/imports/harbor/write_jobs.py) become a results
folder: trials as runs, rewards as outcomes, token usage and cost as rig counts them, trial
exceptions as infrastructure; `rig view` builds its site on it."""

import shutil
from pathlib import Path

import pytest
from import_checks import DATA, cells, imported, ok, one_line_error, rig

from rig.analysis import compare_conditions, infra_summary, load_runs

HARBOR = DATA / "harbor"
# write_jobs.py's REWARDS: haiku's second fix-bug attempt raised, so sonnet's is excluded with it.
BINARY = {
    ("sonnet", "hello-world"): [1.0, 1.0],
    ("sonnet", "fix-bug"): [0.0],
    ("sonnet", "write-tests"): [0.0, 0.0],
    ("haiku", "hello-world"): [1.0, 1.0],
    ("haiku", "fix-bug"): [0.0],
    ("haiku", "write-tests"): [1.0, 0.0],
}
# 0.1.25's write-tests rewards are partial credit (FRACTIONAL).
FRACTIONAL = {
    **BINARY,
    ("sonnet", "write-tests"): [0.25, 0.0],
    ("haiku", "write-tests"): [0.5, 0.0],
}


def _jobs(version: str) -> list[str]:
    return [f"sonnet={HARBOR / version / 'job-sonnet'}", f"haiku={HARBOR / version / 'job-haiku'}"]


@pytest.mark.parametrize("version", ["0.26.0", "0.1.25"])
def test_job_folders_import_end_to_end(version: str, tmp_path: Path) -> None:
    out = tmp_path / "jobs"
    said = ok(rig("import", "harbor", *_jobs(version), "--out", out))
    assert "10 runs of 2 conditions (reference 'sonnet') x 3 tasks" in said
    assert "1 run of infrastructure quarantined (harbor_exception 1) and 1 run of the other arms" in said

    runs, quarantine, design = imported(out)
    assert cells(runs) == (BINARY if version == "0.26.0" else FRACTIONAL)
    assert design["tasks"] == ["hello-world", "fix-bug", "write-tests"]
    # Only 0.2 and later name the Harbor that ran the job (lock.json).
    assert design["source"]["tool_version"] == ("harbor 0.26.0" if version == "0.26.0" else None)
    raised = next(r for r in quarantine if r["infra"]["rule"] == "harbor_exception")
    assert (raised["condition"], raised["task"], raised["repetition"]) == ("haiku", "fix-bug", 2)
    assert raised["infra"]["detail"].startswith("EnvironmentStartTimeoutError: Environment did not start")
    assert raised["source"]["file"].endswith("/result.json") and raised["source"]["item"].startswith(
        "fix-bug__"
    )
    paired = next(r for r in quarantine if r["infra"]["rule"] == "paired_exclusion")
    assert (paired["condition"], paired["task"], paired["repetition"], paired["success"]) == (
        "sonnet",
        "fix-bug",
        2,
        True,
    )

    df = load_runs(out)
    sonnet, haiku = (df[df["condition"] == c] for c in ("sonnet", "haiku"))
    # Harbor's input tokens include the cached ones; rig counts them apart.
    assert set(sonnet["input_tokens"]) == {600} and set(sonnet["cache_read_tokens"]) == {400}
    assert set(sonnet["total_tokens"]) == {1200} and set(haiku["total_tokens"]) == {750}
    assert set(sonnet["cost_usd"]) == {0.01} and set(haiku["wall_s"]) == {60.0}
    assert set(df["harness"]) == {"claude-code"} and set(df["harness_version"]) == {"2.0.14"}
    assert set(haiku["model"]) == {"anthropic/claude-haiku-4-5"} and df["group"].isna().all()
    assert df["tool_calls"].isna().all() and df["task_hash"].notna().all()
    comparisons = {c.metric: c for c in compare_conditions(df)}
    if version == "0.26.0":
        assert "score" not in comparisons and df["score"].isna().all()
        assert comparisons["success"].effect == pytest.approx(3 / 5 - 2 / 5)
    else:
        assert comparisons["success"].effect == pytest.approx(0.0)
        assert comparisons["score"].effect == pytest.approx(2.5 / 5 - 2.25 / 5)
    assert comparisons["cost_usd"].effect == pytest.approx(0.4)
    assert comparisons["total_tokens"].effect == pytest.approx(750 / 1200)
    infra = infra_summary(out).set_index(["task", "condition"])["quarantined"]
    assert infra[("fix-bug", "haiku")] == infra[("fix-bug", "sonnet")] == 1 and infra.sum() == 2


def test_a_job_of_two_models_is_grouped_and_pools(tmp_path: Path) -> None:
    """A condition whose job ran two configurations gets one group per agent/model, and the pin check
    scopes the model to the condition's group: no model differs within one."""
    mixed = tmp_path / "mixed"
    for job in ("job-sonnet", "job-haiku"):
        shutil.copytree(HARBOR / "0.26.0" / job, mixed, dirs_exist_ok=True)
    out = tmp_path / "grouped"
    ok(rig("import", "harbor", f"both={mixed}", f"sonnet={HARBOR / '0.26.0' / 'job-sonnet'}", "--out", out))
    df = load_runs(out)
    groups = df.groupby("condition")["group"].unique().to_dict()
    assert sorted(groups["both"]) == [
        "claude-code/anthropic/claude-haiku-4-5",
        "claude-code/anthropic/claude-sonnet-4-5",
    ]
    assert list(groups["sonnet"]) == ["claude-code/anthropic/claude-sonnet-4-5"]
    assert df.groupby(["condition", "group"])["model"].nunique().max() == 1
    # Cells are (task, group, repetition): haiku's raised trial is in a cell no other arm has, and
    # excludes nothing (by task alone it would take both sonnet trials of fix-bug 2 with it).
    runs, quarantine, _ = imported(out)
    assert len(runs) + len(quarantine) == 18
    lost = sorted((r["condition"], r["group"].rsplit("/", 1)[1], r["infra"]["rule"]) for r in quarantine)
    assert lost == [("both", "claude-haiku-4-5", "harbor_exception")]


def test_rig_view_builds_its_site_on_an_import(tmp_path: Path) -> None:
    out = tmp_path / "jobs"
    ok(rig("import", "harbor", *_jobs("0.26.0"), "--out", out))
    site = tmp_path / "site"
    said = ok(rig("view", out, "--out", site))
    assert said.strip().endswith("index.html") and (site / "report.html").is_file()
    table = (site / "runs.html").read_text()
    assert table.count('<tr data-experiment="jobs"') == 12 and table.count(">quarantined</span>") == 2
    pages = sorted(site.glob("runs/jobs/*/attempt-1.html"))
    assert len(pages) == 12
    text = "".join(page.read_text() for page in pages)
    assert text.count("rig import harbor</code> from") == 12
    # Harbor reports no tool calls: never shown as 0.
    assert text.count("<th>tool calls</th><td>not reported by the source</td>") == 12


def test_bad_job_folders_fail_in_one_line(tmp_path: Path) -> None:
    job = HARBOR / "0.26.0" / "job-sonnet"
    out = tmp_path / "out"
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_error(rig("import", "harbor", f"a={empty}", "--out", out), "holds no Harbor trial")
    broken = tmp_path / "broken"
    shutil.copytree(job, broken)
    next(broken.glob("*/result.json")).write_text('{"not": "a trial"}')
    one_line_error(rig("import", "harbor", f"a={broken}", "--out", out), "is not a Harbor trial result")
    one_line_error(
        rig("import", "harbor", f"a={job}", "--reward", "accuracy", "--out", out),
        "no reward 'accuracy'",
        "reward",
    )
    assert not out.exists()

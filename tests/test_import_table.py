"""`rig import table`: CSV, JSON, JSONL and Parquet tables of runs or of counts per cell become a
results folder that load_runs and the statistics read as rig's own; the folder is idempotent,
atomic, and refuses to replace what it must not."""

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from import_checks import imported, jsonl, one_line_error, rig, written

from rig.analysis import cell_table, compare_conditions, infra_summary, load_runs
from rig.schema import RECORD_SCHEMA_VERSION
from rig.store.migrate import migrate

SMALL = Path(__file__).parent / "data" / "results_small" / "results_small"

# old: t1 1,0,0  t2 0,0  t3 1,1,1 (4 of 8); new: t1 1,1,0  t2 1,0  t3 1,1,1 (6 of 8)
RUNS_CSV = """task,arm,ok
t1,old,1
t1,old,0
t1,old,0
t2,old,0
t2,old,false
t3,old,1
t3,old,True
t3,old,1
t1,new,1
t1,new,1
t1,new,0
t2,new,1
t2,new,0
t3,new,yes
t3,new,1
t3,new,1
"""


def _csv(tmp_path: Path, text: str = RUNS_CSV) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text(text)
    return path


def test_a_table_of_runs_is_read_as_rig_reads_its_own(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    table = _csv(tmp_path)
    said = rig(
        "import", "table", table, "--out", out, "--task", "task", "--condition", "arm", "--success", "ok"
    )
    assert said.exit_code == 0, said.output
    assert "16 runs of 2 conditions (reference 'old') x 3 tasks" in said.stdout

    runs, quarantine, design = imported(out)
    assert len(runs) == 16 and quarantine == []
    assert design["conditions"] == [{"name": "old"}, {"name": "new"}] and design["reference"] == "old"
    assert design["tasks"] == ["t1", "t2", "t3"] and design["estimand"] == "population"
    assert design["name"] == "ab" and design["source"]["kind"] == "table"
    assert design["source"]["inputs"] == {"table": table.as_posix()}
    first = runs[0]
    assert first["source"] == {
        "kind": "table",
        "file": table.as_posix(),
        "item": "row 1",
        "tool_version": None,
    }
    assert first["metrics"]["total_tokens"] is None and first["wall_s"] is None and first["score"] is None

    df = load_runs(out)
    assert len(df) == 16 and df.attrs["conditions"] == ["old", "new"]
    assert set(df["source"]) == {"table"} and df["score"].isna().all() and df["group"].isna().all()
    # Figures the table does not hold are missing, never zero.
    assert df["total_tokens"].isna().all() and df["cost_usd"].isna().all() and df["wall_s"].isna().all()
    assert df[["ran_tests", "read_docs", "tampered", "timed_out", "bash_search_commands"]].isna().all().all()
    rates = df.groupby("condition")["success"].mean()
    assert rates["old"] == 0.5 and rates["new"] == 0.75
    assert list(df[df["condition"] == "old"].groupby("task")["repetition"].max()) == [3, 2, 3]
    (success, *others) = compare_conditions(df)
    assert (success.metric, success.a, success.b, success.n_a, success.n_b) == ("success", "old", "new", 8, 8)
    assert success.effect == pytest.approx(0.25)
    # No usage, no times: those comparisons have no data, and leave the Holm family.
    assert all(c.metric != "score" for c in others) and all(c.note for c in others)

    flipped = tmp_path / "flipped"
    args = ["--task", "task", "--condition", "arm", "--success", "ok", "--reference", "new"]
    assert rig("import", "table", table, "--out", flipped, *args).exit_code == 0
    assert imported(flipped)[2]["conditions"] == [{"name": "new"}, {"name": "old"}]
    assert compare_conditions(load_runs(flipped))[0].effect == pytest.approx(-0.25)


def test_counts_per_cell_expand_into_one_run_per_trial_with_a_group(tmp_path: Path) -> None:
    rows = [
        ("t1", "A", "old", 1, 4),
        ("t1", "A", "new", 3, 4),
        ("t1", "B", "old", 2, 4),
        ("t1", "B", "new", 2, 4),
        ("t2", "A", "old", 0, 2),
        ("t2", "A", "new", 1, 2),
    ]
    table = tmp_path / "counts.parquet"
    names = ["task", "config", "arm", "k", "n"]
    pq.write_table(pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}), table)
    out = tmp_path / "counts"
    args = ["--task", "task", "--condition", "arm", "--group", "config", "--successes", "k", "--trials", "n"]
    assert rig("import", "table", table, "--out", out, *args).exit_code == 0

    runs, _, design = imported(out)
    assert len(runs) == 20 and design["tasks"] == ["t1", "t2"]
    cell = [r for r in runs if (r["task"], r["group"], r["condition"]) == ("t1", "A", "new")]
    assert [(r["repetition"], r["success"]) for r in cell] == [(1, True), (2, True), (3, True), (4, False)]
    assert [r["source"]["item"] for r in cell] == [f"row 2, trial {i}" for i in range(1, 5)]
    assert len({r["run_id"] for r in runs}) == 20

    df = load_runs(out)
    assert sorted(df["group"].unique()) == ["A", "B"]
    cells = cell_table(df).set_index(["task", "condition"])
    assert (cells.loc[("t1", "old"), "n"], cells.loc[("t1", "old"), "successes"]) == (8, 3)
    assert (cells.loc[("ALL", "new"), "n"], cells.loc[("ALL", "new"), "successes"]) == (10, 6)
    # The configuration is a further stratum: stratified by task and group, clustered by task.
    success = compare_conditions(df, strata=["task", "group"], cluster="task")[0]
    assert success.effect == pytest.approx(6 / 10 - 3 / 10)


def test_a_score_out_of_a_maximum_is_partial_credit(tmp_path: Path) -> None:
    table = tmp_path / "scores.jsonl"
    rows = [("t1", "a", 10), ("t1", "a", 5), ("t1", "b", 7), ("t2", "a", 0), ("t2", "b", 10), ("t2", "b", 4)]
    table.write_text("".join(json.dumps({"task": t, "arm": c, "points": s}) + "\n" for t, c, s in rows))
    out = tmp_path / "scores"
    args = ["--task", "task", "--condition", "arm", "--score", "points", "--score-max", "10"]
    assert rig("import", "table", table, "--out", out, *args).exit_code == 0

    df = load_runs(out)
    by_arm = df.groupby("condition")["score"].apply(list)
    assert by_arm["a"] == [1.0, 0.5, 0.0] and by_arm["b"] == [0.7, 1.0, 0.4]
    # Success is full credit.
    assert df.groupby("condition")["success"].sum().to_dict() == {"a": 1, "b": 1}
    comparisons = {c.metric: c for c in compare_conditions(df)}
    assert comparisons["score"].effect == pytest.approx(0.7 - 0.5)
    assert comparisons["success"].effect == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("name", "text", "options", "fragments"),
    [
        (
            "runs.csv",
            RUNS_CSV,
            ["--success", "okk"],
            ["column 'okk' is not in", "its columns: arm, ok, task"],
        ),
        ("runs.csv", "task,arm,ok\nt1,a,0.5\n", ["--success", "ok"], ["row 1", "not 0/1", "--score"]),
        (
            "s.jsonl",
            '{"task": "t", "arm": "a", "ok": 12}\n',
            ["--score", "ok", "--score-max", "10"],
            ["outside [0, 10]"],
        ),
        (
            "c.json",
            '[{"task": "t", "arm": "a", "k": 3, "n": 2}]',
            ["--successes", "k", "--trials", "n"],
            ["3 successes of 2"],
        ),
        ("c.json", '{"task": "t"}', ["--success", "ok"], ["one object per row"]),
        ("runs.txt", RUNS_CSV, ["--success", "ok"], ["not a table rig reads"]),
        ("runs.csv", RUNS_CSV, ["--success", "ok", "--score", "ok"], ["give one outcome"]),
        (
            "runs.csv",
            "task,arm,ok\nt1,a,1\n,a,1\n",
            ["--success", "ok"],
            ["row 2 has no value in column 'task'"],
        ),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, name, text, options, fragments) -> None:
    table = tmp_path / name
    table.write_text(text)
    out = tmp_path / "out"
    one_line_error(
        rig("import", "table", table, "--out", out, "--task", "task", "--condition", "arm", *options),
        *fragments,
    )
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == [name]


def test_importing_again_is_idempotent_and_another_import_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "runs.json"
    table.write_text(
        json.dumps([{"task": "t1", "arm": a, "ok": ok} for a, ok in [("a", True), ("b", False)]])
    )
    args = ["--task", "task", "--condition", "arm", "--success", "ok", "--name", "same"]
    out = tmp_path / "one"
    assert rig("import", "table", table, "--out", out, *args).exit_code == 0
    before = written(out)
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}

    again = rig("import", "table", table, "--out", out, *args)
    assert again.exit_code == 0 and "already holds this import, unchanged" in again.stdout
    assert written(out) == before and {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps
    # Nothing of the import itself (no time, no random id) is in the files: another folder, same bytes.
    assert rig("import", "table", table, "--out", tmp_path / "two", *args).exit_code == 0
    assert written(tmp_path / "two") == before

    other = tmp_path / "other.csv"
    other.write_text("task,arm,ok\nt1,a,0\nt1,b,1\n")
    refused = rig("import", "table", other, "--out", out, *args)
    one_line_error(refused, str(out), "holds another import", "--replace", "new --out")
    assert written(out) == before
    assert rig("import", "table", other, "--out", out, *args, "--replace").exit_code == 0
    assert [r["success"] for r in imported(out)[0]] == [False, True]

    # A failed import leaves the folder as it was, and no half-written sibling.
    bad = tmp_path / "bad.csv"
    bad.write_text("task,arm,ok\nt1,a,2\n")
    after = written(out)
    one_line_error(rig("import", "table", bad, "--out", out, *args, "--replace"), "not 0/1")
    assert written(out) == after
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv", "one", "other.csv", "runs.json", "two"]

    # A rig run's results are never replaced.
    results = tmp_path / "measured"
    shutil.copytree(SMALL, results)
    one_line_error(
        rig("import", "table", table, "--out", results, *args, "--replace"), "not a folder `rig import` wrote"
    )
    assert len(jsonl(results / "runs.jsonl")) == 30


def test_rig_own_records_migrate_to_schema_12_unchanged_in_the_frame(tmp_path: Path) -> None:
    record = jsonl(SMALL / "runs.jsonl")[0]
    migrated = migrate({**record, "record_schema": 11})
    assert migrated["record_schema"] == RECORD_SCHEMA_VERSION == 12
    assert (migrated["source"], migrated["score"], migrated["group"]) == (None, None, None)
    df = load_runs(SMALL)
    # A frame of rig's own runs keeps its dtypes: no figure of theirs is missing.
    assert df["total_tokens"].dtype == "int64" and df["ran_tests"].dtype == bool
    assert df["source"].isna().all() and df["score"].isna().all()
    assert infra_summary(SMALL)["quarantined"].sum() == 0

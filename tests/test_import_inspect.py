"""`rig import inspect`: genuine Inspect AI eval logs, written offline by the installed inspect_ai's
mockllm model (and committed logs of inspect_ai 0.3.60), become a results folder: samples as tasks,
epochs as repetitions, grades as outcomes, infrastructure excluded from both arms alike."""

import importlib.util
import os
from dataclasses import asdict
from pathlib import Path

import pytest
from import_checks import DATA, cells, imported, ok, one_line_error, rig

from rig.analysis import compare_conditions, infra_summary, load_runs
from rig.ingest.common import Input
from rig.ingest.inspect import read_logs

WRITER = DATA / "inspect" / "write_logs.py"
OLD = DATA / "inspect" / "0.3.60"

# What tests/data/imports/inspect/write_logs.py plants, read off its GRADES (C 1, I 0, P 0.5): the
# limit-hit s4 epoch 2 of baseline and the errored s2 epoch 2 of treatment are infrastructure, and
# the other arm's run of each of those cells is excluded with it.
EXPECTED = {
    ("baseline", "s1"): [1.0, 0.0],
    ("baseline", "s2"): [0.0],
    ("baseline", "s3"): [1.0, 1.0],
    ("baseline", "s4"): [1.0],
    ("treatment", "s1"): [1.0, 1.0],
    ("treatment", "s2"): [1.0],
    ("treatment", "s3"): [1.0, 0.5],
    ("treatment", "s4"): [0.0],
}


def _writer():
    spec = importlib.util.spec_from_file_location("write_logs", WRITER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    """The planted logs, written now by the inspect_ai of rig's dev extra: .eval by its eval(), and the
    same logs as .json by its own log writer."""
    from inspect_ai.log import read_eval_log, write_eval_log

    out = tmp_path_factory.mktemp("inspect")
    with pytest.MonkeyPatch.context() as patch:
        # Inspect keeps traces in its data folder: this test's own, not the user's.
        patch.setenv("XDG_DATA_HOME", str(out / "data"))
        logs = _writer().write_logs(out / "eval", "eval")
    as_json = {}
    for condition, path in logs.items():
        as_json[condition] = out / "json" / f"{condition}.json"
        write_eval_log(read_eval_log(str(path)), str(as_json[condition]), format="json")
    return {"eval": logs, "json": as_json}


def _inputs(logs: dict[str, Path]) -> list[Input]:
    return [Input(condition, logs[condition]) for condition in ("baseline", "treatment")]


def test_fresh_logs_import_end_to_end(fresh, tmp_path: Path) -> None:
    out = tmp_path / "planted"
    logs = fresh["eval"]
    said = ok(
        rig(
            "import",
            "inspect",
            f"baseline={logs['baseline']}",
            f"treatment={logs['treatment']}",
            "--out",
            out,
        )
    )
    assert "12 runs of 2 conditions (reference 'baseline') x 4 tasks" in said
    assert "2 runs of infrastructure quarantined (inspect_error 1, inspect_limit 1) and 2 runs of" in said

    runs, quarantine, design = imported(out)
    assert cells(runs) == EXPECTED
    assert design["source"]["tool_version"] == "inspect_ai 0.3.285" and design["tasks"] == [
        "s1",
        "s2",
        "s3",
        "s4",
    ]
    why = {(r["condition"], r["task"], r["repetition"]): r["infra"]["rule"] for r in quarantine}
    assert why == {
        ("baseline", "s2", 2): "paired_exclusion",
        ("baseline", "s4", 2): "inspect_limit",
        ("treatment", "s2", 2): "inspect_error",
        ("treatment", "s4", 2): "paired_exclusion",
    }
    errored = next(r for r in quarantine if r["infra"]["rule"] == "inspect_error")
    assert "planted error" in errored["infra"]["detail"] and errored["source"]["item"] == "sample s2 epoch 2"

    df = load_runs(out)
    assert df.groupby("condition")["success"].sum().to_dict() == {"baseline": 4, "treatment": 4}
    baseline, treatment = (df[df["condition"] == c] for c in ("baseline", "treatment"))
    # The usage each arm's model responses carried; baseline's reported no cache reads: missing, not 0.
    assert set(baseline["total_tokens"]) == {120} and set(treatment["total_tokens"]) == {140}
    assert set(treatment["cache_read_tokens"]) == {50} and baseline["cache_read_tokens"].isna().all()
    assert set(df["input_tokens"]) == {100, 80} and set(df["tool_calls"]) == {0}
    assert (
        df["wall_s"].notna().all()
        and set(df["harness"]) == {"planted"}
        and set(df["model"]) == {"mockllm/model"}
    )
    comparisons = {c.metric: c for c in compare_conditions(df)}
    assert comparisons["success"].effect == pytest.approx(0.0)
    # P is partial credit: the import compares the score too. 4.5 / 6 - 4 / 6.
    assert comparisons["score"].effect == pytest.approx(0.75 - 4 / 6)
    assert comparisons["total_tokens"].effect == pytest.approx(140 / 120)
    infra = infra_summary(out).set_index(["task", "condition"])["quarantined"]
    assert infra[("s2", "treatment")] == infra[("s2", "baseline")] == infra[("s4", "baseline")] == 1
    assert infra.sum() == 4


@pytest.mark.parametrize("version", ["fresh-eval", "fresh-json", "0.3.60-eval", "0.3.60-json"])
def test_both_readers_read_every_format_alike(fresh, version: str) -> None:
    """inspect_ai's own reader and rig's reading of the documented format give the same runs, for
    .eval (Zstandard members in 0.3.285, deflate in 0.3.60) and .json logs of both versions."""
    made, fmt = version.split("-")
    logs = fresh[fmt] if made == "fresh" else {c: OLD / f"{c}.{fmt}" for c in ("baseline", "treatment")}
    with_inspect = read_logs(_inputs(logs), use_inspect=True)
    documented = read_logs(_inputs(logs), use_inspect=False)
    assert [asdict(r) for r in documented.runs] == [asdict(r) for r in with_inspect.runs]
    planted = {
        (r.condition, r.task, r.repetition): (r.outcome, r.infra and r.infra[0]) for r in documented.runs
    }
    assert planted[("baseline", "s4", 2)] == (None, "inspect_limit")
    assert planted[("treatment", "s2", 2)] == (None, "inspect_error")
    assert planted[("treatment", "s3", 2)] == (0.5, None) and planted[("baseline", "s1", 2)] == (0.0, None)
    expected_version = "inspect_ai 0.3.60" if made == "0.3.60" else "inspect_ai 0.3.285"
    assert {r.tool_version for r in documented.runs} == {expected_version}


def test_an_older_inspect_log_imports_alike(tmp_path: Path) -> None:
    out = tmp_path / "old"
    ok(
        rig(
            "import",
            "inspect",
            f"baseline={OLD / 'baseline.eval'}",
            f"treatment={OLD / 'treatment.json'}",
            "--out",
            out,
        )
    )
    runs, _, design = imported(out)
    assert cells(runs) == EXPECTED and design["source"]["tool_version"] == "inspect_ai 0.3.60"
    df = load_runs(out)
    # inspect_ai 0.3.60 recorded no sample times.
    assert df["wall_s"].isna().all() and set(df["total_tokens"]) == {120, 140}


def test_another_scorer_and_a_non_default_reference(fresh, tmp_path: Path) -> None:
    out = tmp_path / "reversed"
    logs = fresh["eval"]
    args = ["--scorer", "reversed_scorer", "--reference", "treatment", "--estimand", "these_tasks"]
    ok(
        rig(
            "import",
            "inspect",
            f"baseline={logs['baseline']}",
            f"treatment={logs['treatment']}",
            "--out",
            out,
            *args,
        )
    )
    runs, _, design = imported(out)
    assert design["reference"] == "treatment" and design["estimand"] == "these_tasks"
    assert [c["name"] for c in design["conditions"]] == ["treatment", "baseline"]
    flipped = {key: [{1.0: 0.0, 0.0: 1.0}.get(v, v) for v in values] for key, values in EXPECTED.items()}
    assert cells(runs) == flipped
    success = compare_conditions(load_runs(out))[0]
    assert (success.a, success.b) == ("treatment", "baseline")
    assert success.effect == pytest.approx(2 / 6 - 1 / 6)


def test_bad_logs_fail_in_one_line(fresh, tmp_path: Path) -> None:
    baseline = fresh["eval"]["baseline"]
    out = tmp_path / "out"
    not_zip = tmp_path / "notes.eval"
    not_zip.write_text("not a zip")
    not_log = tmp_path / "other.json"
    not_log.write_text('{"samples": []}')
    one_line_error(
        rig("import", "inspect", f"a={baseline}", f"b={not_zip}", "--out", out), "is not an Inspect eval log"
    )
    for reader in (True, False):
        with pytest.raises(ValueError, match="is not an Inspect eval log"):
            read_logs([Input("b", not_log)], use_inspect=reader)
    one_line_error(rig("import", "inspect", str(baseline), "--out", out), "is not NAME=LOG")
    one_line_error(rig("import", "inspect", f"a={baseline}", f"a={baseline}", "--out", out), "given twice")
    one_line_error(rig("import", "inspect", f"a={tmp_path / 'gone.eval'}", "--out", out), "no such file")
    one_line_error(
        rig("import", "inspect", f"a={baseline}", "--scorer", "nope", "--out", out),
        "no scorer 'nope'",
        "grade_scorer, reversed_scorer",
    )
    one_line_error(
        rig("import", "inspect", f"a={baseline}", "--reference", "b", "--out", out), "--reference 'b'"
    )
    one_line_error(rig("import", "inspect", f"a={baseline}", "--estimand", "tasks", "--out", out), "estimand")
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".")]

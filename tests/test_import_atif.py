"""`rig import atif`: ATIF trajectories, validated with the atif package, become a results folder:
`rig export`'s (ATIF-v1.8, a round trip of rig's own results), Harbor's trial trajectories of two
versions (ATIF-v1.8 and ATIF-v1.5) and trajectories that state their outcome in `extra`."""

import json
import shutil
from pathlib import Path

import atif
import pytest
from import_checks import DATA, cells, imported, jsonl, ok, one_line_error, rig
from test_import_harbor import BINARY, FRACTIONAL

from rig.analysis import infra_summary, load_runs
from rig.export.atif import export_atif
from rig.store.redact import Redactor

SMALL = Path(__file__).parent / "data" / "results_small" / "results_small"
HARBOR = DATA / "harbor"
# What a round trip through ATIF keeps of a run, as load_runs reads it.
KEPT = [
    "task", "condition", "repetition", "success", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens", "total_tokens", "cost_usd", "tool_calls", "tool_errors",
    "wall_s", "harness", "harness_version", "model", "fixture_hash", "task_hash", "hidden_tests_hash",
    "rig_version",
]  # fmt: skip


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def _find(records: list[dict], task: str, condition: str, repetition: int) -> dict:
    return next(
        r for r in records if (r["task"], r["condition"], r["repetition"]) == (task, condition, repetition)
    )


def test_rig_export_round_trips(tmp_path: Path) -> None:
    """rig's own results, exported as ATIF and imported back: every kept figure as it was; a run the
    rig reran after an infrastructure attempt stays, a run lost to infrastructure is excluded with its
    partner in the other arm."""
    measured = tmp_path / "measured"
    shutil.copytree(SMALL, measured)
    records = jsonl(measured / "runs.jsonl")
    stall = {"is_infra": True, "rule": "stalled_provider", "detail": "no output for 30 s"}
    rerun = _find(records, "t1_fix_pagination", "agents_md", 1)
    lost = _find(records, "t2_add_endpoint", "no_agents_md", 2)
    quarantine = [{**rerun, "infra": stall}, {**lost, "infra": stall}]
    rerun["attempt"] = 2
    _write_jsonl(measured / "runs.jsonl", [r for r in records if r is not lost])
    _write_jsonl(measured / "quarantine.jsonl", quarantine)
    trajectories = tmp_path / "atif"
    exported = export_atif(
        measured, trajectories, Redactor.for_machine(runs_root=tmp_path / "r", repo_root=tmp_path)
    )
    assert (exported.scored, exported.quarantined) == (29, 2)

    out = tmp_path / "back"
    said = ok(
        rig("import", "atif", f"agents_md={trajectories}", f"no_agents_md={trajectories}", "--out", out)
    )
    assert "28 runs of 2 conditions (reference 'agents_md') x 5 tasks" in said
    runs, quarantined, design = imported(out)
    assert design["source"]["tool_version"] == "ATIF-v1.8"
    rules = sorted((r["task"], r["condition"], r["attempt"], r["infra"]["rule"]) for r in quarantined)
    assert rules == [
        ("t1_fix_pagination", "agents_md", 1, "stalled_provider"),
        ("t2_add_endpoint", "agents_md", 1, "paired_exclusion"),
        ("t2_add_endpoint", "no_agents_md", 1, "stalled_provider"),
    ]
    infra = infra_summary(out).set_index(["task", "condition"])
    assert tuple(infra.loc[("t1_fix_pagination", "agents_md")]) == ("back", 1, 0)  # rerun, not lost
    assert tuple(infra.loc[("t2_add_endpoint", "no_agents_md")]) == ("back", 1, 1)
    assert tuple(infra.loc[("t2_add_endpoint", "agents_md")]) == ("back", 1, 1)

    before = load_runs(measured)
    before = before[~((before["task"] == "t2_add_endpoint") & (before["repetition"] == 2))]
    after = load_runs(out)  # the pins rig export carried are checked as rig's own
    key = ["condition", "task", "repetition"]
    before, after = (df[KEPT].sort_values(key).reset_index(drop=True) for df in (before, after))
    assert len(after) == 28
    for column in KEPT:
        assert before[column].astype(object).tolist() == after[column].astype(object).tolist(), column
    assert after["rig_version"].notna().all() and after["total_tokens"].gt(0).all()


@pytest.mark.parametrize(("version", "schema"), [("0.26.0", "ATIF-v1.8"), ("0.1.25", "ATIF-v1.5")])
def test_harbor_trajectories_take_their_trial_outcome(version: str, schema: str, tmp_path: Path) -> None:
    out = tmp_path / "trajectories"
    jobs = [f"sonnet={HARBOR / version / 'job-sonnet'}", f"haiku={HARBOR / version / 'job-haiku'}"]
    ok(rig("import", "atif", *jobs, "--out", out))
    runs, quarantined, design = imported(out)
    assert cells(runs) == (BINARY if version == "0.26.0" else FRACTIONAL)
    assert design["source"]["tool_version"] == schema
    assert sorted(r["infra"]["rule"] for r in quarantined) == ["harbor_exception", "paired_exclusion"]
    df = load_runs(out)
    sonnet = df[df["condition"] == "sonnet"]
    # The trajectory's final metrics: prompt tokens include the cached ones.
    assert set(sonnet["input_tokens"]) == {600} and set(sonnet["cache_read_tokens"]) == {400}
    assert set(sonnet["total_tokens"]) == {1200} and set(sonnet["cost_usd"]) == {0.01}
    assert set(df["tool_calls"]) == {0} and set(sonnet["wall_s"]) == {90.0}
    assert df["cache_write_tokens"].isna().all()


def _trajectory(task: str, reward: float | None, tokens: tuple[int, int]) -> dict:
    extra = {"task": task} if reward is None else {"task": task, "reward": reward}
    steps = [atif.Step(step_id=1, source="user", message="Do it.")]
    for number, prompt in enumerate(tokens, start=2):
        metrics = atif.Metrics(prompt_tokens=prompt, completion_tokens=10, cached_tokens=0)
        calls = [atif.ToolCall(tool_call_id=f"c{number}", function_name="bash", arguments={"cmd": "ls"})]
        steps.append(
            atif.Step(step_id=number, source="agent", message="ok", tool_calls=calls, metrics=metrics)
        )
    document = atif.Trajectory(
        schema_version="ATIF-v1.8",
        session_id=f"{task}-{reward}",
        agent=atif.Agent(name="my-agent", version="1.0", model_name="m"),
        steps=steps,
        extra=extra,
    )
    return document.to_json_dict()


def _folder(path: Path, documents: list[dict]) -> Path:
    path.mkdir()
    for number, document in enumerate(documents):
        (path / f"trajectory-{number}.json").write_text(json.dumps(document))
    return path


def test_trajectories_stating_their_outcome(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", [_trajectory("t1", 1.0, (100, 200)), _trajectory("t1", 0.5, (100, 100))])
    b = _folder(tmp_path / "b", [_trajectory("t1", 0.0, (50, 50))])
    (a / "config.json").write_text('{"not": "a trajectory"}')  # passed over
    out = tmp_path / "own"
    ok(rig("import", "atif", f"a={a}", f"b={b}", "--out", out))
    runs, _, _ = imported(out)
    assert cells(runs) == {("a", "t1"): [1.0, 0.5], ("b", "t1"): [0.0]}
    df = load_runs(out)
    # No final metrics: every agent step's own, summed.
    assert df.set_index(["condition", "repetition"])["total_tokens"].to_dict() == {
        ("a", 1): 320,
        ("a", 2): 220,
        ("b", 1): 120,
    }
    assert set(df["tool_calls"]) == {2} and df["cost_usd"].isna().all()


def test_bad_trajectories_fail_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    broken = _trajectory("t1", 1.0, (1, 1))
    broken["steps"][1]["step_id"] = 7
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    one_line_error(
        rig("import", "atif", f"a={path}", "--out", out), "not a valid ATIF trajectory", "not sequential"
    )
    silent = tmp_path / "silent.json"
    silent.write_text(json.dumps(_trajectory("t1", None, (1, 1))))
    one_line_error(rig("import", "atif", f"a={silent}", "--out", out), "states no outcome", "extra.reward")
    one_line_error(rig("import", "atif", f"a={DATA / 'harbor' / 'write_jobs.py'}", "--out", out), "not JSON")
    both = tmp_path / "both"
    export_atif(SMALL, both, Redactor.for_machine(runs_root=tmp_path / "r", repo_root=tmp_path))
    one_line_error(
        rig("import", "atif", f"x={both}", "--out", out),
        "conditions agents_md, no_agents_md",
        f"agents_md={both}",
    )
    assert not out.exists()

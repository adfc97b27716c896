"""ATIF export: every harness's session as a valid trajectory, and `rig export` on a results folder."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import atif
import pytest
from test_transcripts import SUCCESS, small_attempt

from rig.export.atif import SCHEMA_VERSION, trajectory, validated_json
from rig.schema import RunRecord
from rig.store.redact import Redactor

RIG = str(Path(sys.executable).with_name("rig"))
REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "tests" / "data" / "results_small" / "results_small"
SMALL_CONFIG = REPO / "tests" / "data" / "results_small.toml"


def record_for(harness: str) -> RunRecord:
    """The committed scripted record, as if `harness` had run the captured session."""
    record, _ = small_attempt()
    _, metrics, _ = SUCCESS[harness]
    return RunRecord.model_validate(record).model_copy(
        update={"harness": harness, "harness_version": f"{harness}-captured", "metrics": metrics}
    )


@pytest.mark.parametrize("harness", list(SUCCESS))
def test_each_harness_session_round_trips_as_valid_atif(harness, tmp_path):
    transcript, metrics, _ = SUCCESS[harness]
    record = record_for(harness)
    redactor = Redactor.for_machine(runs_root=tmp_path / "runs", repo_root=REPO)

    text = validated_json(redactor.value(trajectory(record, transcript, "scored").model_dump(mode="json")))
    loaded = atif.Trajectory.model_validate_json(text)

    assert loaded.schema_version == SCHEMA_VERSION
    assert loaded.agent.name == harness and loaded.agent.version == f"{harness}-captured"
    assert [s.source for s in loaded.steps] == [s.source for s in transcript.steps]
    agent = [s for s in loaded.steps if s.source == "agent"]
    assert len(agent) == metrics.assistant_messages
    calls = [c for s in agent for c in s.tool_calls or []]
    assert len(calls) == metrics.tool_calls and len({c.tool_call_id for c in calls}) == len(calls)
    results = [r for s in agent if s.observation for r in s.observation.results]
    # Every call has its output, next to it in the same step.
    assert [r.source_call_id for r in results] == [c.tool_call_id for c in calls]
    assert sum(r.extra["is_error"] for r in results) == metrics.tool_errors
    assert sum(s.metrics.completion_tokens for s in agent) == metrics.output_tokens
    assert sum(s.metrics.cached_tokens for s in agent) == metrics.cache_read_tokens
    final = loaded.final_metrics
    assert final.total_completion_tokens == metrics.output_tokens and final.total_steps == len(loaded.steps)
    assert final.total_cost_usd == metrics.cost_usd
    assert loaded.extra["rig"]["status"] == "scored" and loaded.extra["rig"]["pins"]["harness_version"]


def test_a_free_form_tool_input_becomes_an_object():
    transcript, _, _ = SUCCESS["codex"]
    patches = [c for s in transcript.steps for c in s.tool_calls if c.name == "apply_patch"]
    assert patches and all(isinstance(c.arguments, str) for c in patches)

    loaded = trajectory(record_for("codex"), transcript, "scored")

    exported = [c for s in loaded.steps for c in s.tool_calls or [] if c.function_name == "apply_patch"]
    assert [c.arguments for c in exported] == [{"input": c.arguments} for c in patches]


def test_an_invalid_trajectory_is_refused():
    transcript, _, _ = SUCCESS["pi"]
    document = trajectory(record_for("pi"), transcript, "scored").model_dump(mode="json")
    document["steps"][1]["step_id"] = 7

    with pytest.raises(ValueError, match="not sequential"):
        validated_json(document)


# --- the command line -----------------------------------------------------------------------------


def rig(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RIG_RESULTS_ROOT": str(tmp_path / "results"),
        "RIG_RUNS_ROOT": str(tmp_path / "runs"),
        "HOME": str(tmp_path / "home"),
    }
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    """A copy of the small results folder whose first run was quarantined once (then scored on its
    second attempt) and whose session names the home directory; exported with `rig export`."""
    tmp_path = tmp_path_factory.mktemp("export")
    folder = tmp_path / "results" / "results_small"
    shutil.copytree(SMALL, folder)
    lines = (folder / "runs.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    quarantined = {**first, "infra": {"is_infra": True, "rule": "provider_error", "detail": "HTTP 500"}}
    rerun = {**first, "attempt": 2, "artifacts": first["artifacts"].replace("attempt-1", "attempt-2")}
    shutil.copytree(folder / first["artifacts"], folder / rerun["artifacts"])
    (folder / "quarantine.jsonl").write_text(json.dumps(quarantined) + "\n")
    (folder / "runs.jsonl").write_text("\n".join([json.dumps(rerun), *lines[1:]]) + "\n")
    session = folder / rerun["artifacts"] / "session.jsonl"
    session.write_text(session.read_text().replace('"README.md"', json.dumps(f"{tmp_path}/home/README.md")))
    proc = rig(tmp_path, "export", str(SMALL_CONFIG))
    return tmp_path, folder, proc


def test_export_writes_one_valid_trajectory_per_attempt(exported):
    _, folder, proc = exported
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()]
    files = sorted((folder / "atif").iterdir())

    assert len(files) == len(records) + 1 == 31
    assert proc.stdout.strip() == f"31 ATIF trajectories (30 scored, 1 quarantined) in {folder / 'atif'}"
    by_name = {f.name: atif.Trajectory.model_validate_json(f.read_text()) for f in files}
    for record in (RunRecord.model_validate(r).model_dump(mode="json") for r in records):
        loaded = by_name[f"{record['run_id']}__attempt-{record['attempt']}.json"]
        verdict = loaded.extra["rig"]
        assert verdict["status"] == "scored" and verdict["success"] == record["success"]
        assert verdict["failing_stage"] == record["failing_stage"]
        assert verdict["hidden"] == record["hidden"] and verdict["gate"] == record["check"]
        assert verdict["pins"] == record["pins"] and verdict["condition"] == record["condition"]
        assert loaded.final_metrics.total_cost_usd == record["metrics"]["cost_usd"]
        assert sum(s.source == "agent" for s in loaded.steps) == record["metrics"]["assistant_messages"]
    quarantined = by_name[f"{records[0]['run_id']}__attempt-1.json"].extra["rig"]
    assert quarantined["status"] == "quarantined" and quarantined["infra"]["rule"] == "provider_error"


def test_export_output_is_redacted(exported):
    tmp_path, folder, _ = exported
    record = json.loads((folder / "runs.jsonl").read_text().splitlines()[0])
    text = (folder / "atif" / f"{record['run_id']}__attempt-2.json").read_text()

    assert str(tmp_path) not in text and "<HOME>/README.md" in text


def test_an_unknown_format_is_one_line_and_exit_2(tmp_path):
    shutil.copytree(SMALL, tmp_path / "results" / "results_small")

    proc = rig(tmp_path, "export", str(SMALL_CONFIG), "--format", "jsonl")

    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "use atif" in proc.stderr
    assert not (tmp_path / "results" / "results_small" / "atif").exists()


def test_a_record_that_cannot_be_exported_writes_nothing(tmp_path):
    folder = tmp_path / "results" / "results_small"
    shutil.copytree(SMALL, folder)
    lines = (folder / "runs.jsonl").read_text().splitlines()
    broken = {**json.loads(lines[-1]), "harness_version": None}
    (folder / "runs.jsonl").write_text("\n".join([*lines[:-1], json.dumps(broken)]) + "\n")
    out = tmp_path / "out"

    proc = rig(tmp_path, "export", str(SMALL_CONFIG), "--out", str(out))

    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "nothing was written" in proc.stderr and list(out.iterdir()) == []


def test_an_output_folder_that_is_a_symlink_is_refused(tmp_path):
    folder = tmp_path / "results" / "results_small"
    shutil.copytree(SMALL, folder)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (folder / "atif").symlink_to(elsewhere)

    proc = rig(tmp_path, "export", str(SMALL_CONFIG))

    assert proc.returncode == 2 and "is a symlink" in proc.stderr and list(elsewhere.iterdir()) == []

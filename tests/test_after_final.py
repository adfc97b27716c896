"""A harness that answered and then went silent is ended after `[timeouts] after_final_s` and scored
on its work: neither infrastructure nor a hang (`agent.ended_after_final`).

Each real CLI's final event is read from its own captured stream (tests/data/<harness>/success):
the supervisor runs a real process that writes that stream and then stays alive, silent; a stream
cut before its final event is a stall as before. Through `rig run`, the scripted agent answers
with the reference solution and then hangs."""

import json
import shlex
import time
from pathlib import Path

import pytest
from test_run_pipeline import condition, read_jsonl, results, rig, write_experiment

from harnesses.registry import adapter_class, calibrated_names
from rig.confine.agent import Confinement, run_agent_process

DATA = Path(__file__).parent / "data"
AFTER_FINAL_S = 1.0
STALL_S = 4.0


def captured_stream(harness: str) -> Path:
    return DATA / harness.replace("-", "_") / "success" / "stdout.log"


def play(stream: bytes, tmp_path: Path, harness: str):
    """Run a process that writes `stream`, then sleeps, under the supervisor with `harness`'s rule."""
    played = tmp_path / "played.log"
    played.write_bytes(stream)
    command = ["sh", "-c", f"cat {shlex.quote(str(played))}; exec sleep 600"]
    return run_agent_process(
        command,
        tmp_path,
        {"PATH": "/usr/bin:/bin"},
        tmp_path / "run",
        timeout=60,
        stall_s=STALL_S,
        confinement=Confinement(after_final_s=AFTER_FINAL_S),
        final_event=adapter_class(harness).final_event,
    )


@pytest.mark.parametrize("harness", calibrated_names())
def test_each_clis_final_event_is_the_last_of_its_captured_stream(harness):
    is_final = adapter_class(harness).final_event
    assert is_final is not None
    events = [json.loads(line) for line in captured_stream(harness).read_text().splitlines() if line.strip()]
    assert [i for i, event in enumerate(events) if is_final(event)] == [len(events) - 1]


@pytest.mark.parametrize("harness", calibrated_names())
def test_a_cli_silent_after_its_final_answer_is_ended_and_not_stalled(harness, tmp_path):
    start = time.monotonic()
    run = play(captured_stream(harness).read_bytes(), tmp_path, harness)
    assert run.ended_after_final and not run.stalled and not run.timed_out and run.exit_code is None
    assert time.monotonic() - start < STALL_S
    # The whole stream was kept: the run is scored on it.
    assert (tmp_path / "run" / "stdout.log").read_bytes() == captured_stream(harness).read_bytes()


@pytest.mark.parametrize("harness", calibrated_names())
def test_a_cli_silent_before_its_final_answer_still_stalls(harness, tmp_path):
    lines = captured_stream(harness).read_bytes().splitlines(keepends=True)
    run = play(b"".join(lines[:-1]), tmp_path, harness)
    assert run.stalled and not run.ended_after_final


def test_rig_run_scores_an_agent_that_answered_then_hung_on_its_work(tmp_path):
    exp = write_experiment(
        tmp_path,
        "after_final",
        condition("answered", "answer_then_hang"),
        tasks=["t1_fix_pagination"],
        timeouts={"agent_s": 120, "stall_s": 60, "after_final_s": AFTER_FINAL_S},
    )
    start = time.monotonic()
    proc = rig(tmp_path, "run", str(exp))
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 60
    (record,) = read_jsonl(results(tmp_path, "after_final") / "runs.jsonl")
    assert record["agent"]["ended_after_final"] is True
    assert record["stalled"] is False and record["timed_out"] is False and record["hang"] is None
    assert not record["infra"]["is_infra"]
    assert record["success"] is True, record["failing_stage"]

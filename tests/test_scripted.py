"""The scripted harness, run for real: a subprocess in a fixture copy, parsed from its session."""

import json
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest
from builtin_pack import BUILTIN, FIXTURE_DIR
from conftest import run_check_json

import rig
from harnesses.logs import read_jsonl
from harnesses.scripted import agent
from harnesses.scripted.adapter import PATCH_COPY, SCRIPT_COPY, ScriptedHarness, attempt_number, tamper_plan
from rig.packs.manifest import load_pack
from rig.paths import REPO_ROOT
from rig.schema import AgentRun, Condition, Metrics, Task
from rig.session.shell import judge
from rig.workspace.build import apply_patch, copy_fixture, tree_digest

PROMPT = "Fix the pagination bug."


def run_policy(
    task: Task,
    workdir: Path,
    run_dir: Path,
    policy: str,
    *,
    timeout: int = 60,
    stall_s: float = 30.0,
    thinking: str | None = None,
    **options: object,
) -> tuple[ScriptedHarness, AgentRun, Metrics]:
    harness = ScriptedHarness(task, stall_s=stall_s)
    condition = Condition(name="test", thinking=thinking, harness_options={"policy": policy, **options})
    run = harness.run(workdir, PROMPT, condition, run_dir, timeout)
    # As the engine does: the adapter parses, the task's pack judges docs, gate and tests.
    return harness, run, judge(harness.parse_session(run), task.pack.spec)


def header(run: AgentRun) -> dict:
    events = read_jsonl(run.session_path)
    assert events and events[0]["type"] == "session"
    return events[0]


def tool_exit_codes(run: AgentRun) -> list[int]:
    return [
        e["message"]["details"]["exitCode"]
        for e in read_jsonl(run.session_path)
        if e["type"] == "message" and e["message"]["role"] == "toolResult"
    ]


def expected_usage(messages: int) -> dict[str, object]:
    return {
        "input_tokens": messages * agent.USAGE_INPUT,
        "output_tokens": messages * agent.USAGE_OUTPUT,
        "cache_read_tokens": messages * agent.USAGE_CACHE_READ,
        "cache_write_tokens": messages * agent.USAGE_CACHE_WRITE,
        "reasoning_tokens": messages * agent.USAGE_REASONING,
        "total_tokens": messages * agent.USAGE_TOTAL,
    }


def live_group_members(pgid: int) -> list[int]:
    """Processes (zombies excepted) whose process group is `pgid`, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.append(int(stat.parent.name))
    return members


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def wait_for_group_exit(pgid: int, within_s: float = 5.0) -> list[int]:
    """The group's live members once it is empty or `within_s` has passed (SIGKILL is asynchronous)."""
    deadline = time.monotonic() + within_s
    while (members := live_group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return members


def test_solution_fixes_the_task_and_metrics_match_the_script(workspace, task, tmp_path):
    harness, run, metrics = run_policy(
        task, workspace, tmp_path / "run" / "attempt-1", "solution", thinking="high"
    )

    assert run.exit_code == 0 and not run.timed_out and not run.stalled
    assert tool_exit_codes(run) == [0, 0, 0]
    code, report = run_check_json(workspace)
    assert code == 0 and report["ok"], report
    assert harness.version() == f"scripted-{rig.__version__}"
    assert header(run)["prompt"] == PROMPT
    # The stdout stream mirrors the session line for line.
    assert run.stdout_path.read_text() == run.session_path.read_text()

    assert metrics.model == agent.DEFAULT_MODEL
    assert metrics.thinking_level == "high"
    assert metrics.assistant_messages == 4
    assert metrics.tool_calls == 3
    assert metrics.tool_calls_by_name == {"read": 1, "bash": 2}
    assert metrics.tool_errors == 0
    assert metrics.model_dump(include=set(expected_usage(4))) == expected_usage(4)
    assert metrics.cost_usd == pytest.approx(4 * agent.USAGE_COST)
    assert metrics.cost_source == "harness"
    assert metrics.stop_reasons == ["toolUse", "toolUse", "toolUse", "stop"]
    assert metrics.error_messages == [] and metrics.transport_failures == 0
    # The agent applies a copy in its run directory: no path into the rig's repository reaches it.
    copy = (tmp_path / "run" / "attempt-1" / PATCH_COPY).resolve()
    assert copy.read_bytes() == task.solution_patch.read_bytes()
    assert metrics.bash_commands == [f"git apply {copy}", "python scripts/check.py"]
    assert metrics.bash_search_commands == []
    assert metrics.read_paths == ["AGENTS.md"]
    assert metrics.docs_read == ["AGENTS.md"]
    assert metrics.ran_check_script and not metrics.ran_pytest and not metrics.read_skill
    assert metrics.final_text == agent.FINAL_DONE
    assert harness.infra_signature(run, metrics) is None


def test_nothing_changes_nothing(workspace, task, tmp_path):
    before = tree_digest(workspace)
    harness, run, metrics = run_policy(task, workspace, tmp_path / "run", "nothing")

    assert run.exit_code == 0
    assert tree_digest(workspace) == before
    assert metrics.assistant_messages == 2
    assert metrics.tool_calls_by_name == {"read": 1}
    assert metrics.docs_read == ["README.md"]
    assert not metrics.ran_check_script
    assert metrics.final_text == agent.FINAL_NOTHING
    assert metrics.thinking_level is None


def test_decoy_applies_the_named_decoy(workspace, task, tmp_path):
    # Without AGENTS.md the agent falls back to the README.
    (workspace / "AGENTS.md").unlink()
    expected = copy_fixture(FIXTURE_DIR, tmp_path / "expected")
    (expected / "AGENTS.md").unlink()
    apply_patch(expected, task.setup_patch)
    apply_patch(expected, task.decoy_patch("full_page_heuristic"))

    _, run, metrics = run_policy(task, workspace, tmp_path / "run", "decoy", decoy="full_page_heuristic")

    assert run.exit_code == 0
    assert tree_digest(workspace) == tree_digest(expected)
    copy = (tmp_path / "run" / PATCH_COPY).resolve()
    assert copy.read_bytes() == task.decoy_patch("full_page_heuristic").read_bytes()
    assert metrics.bash_commands[0] == f"git apply {copy}"
    assert metrics.docs_read == ["README.md"]
    # The gate fails on this decoy: a non-zero exit is recorded, but it is not a tool error.
    assert tool_exit_codes(run) == [0, 0, 1]
    assert metrics.tool_errors == 0


def test_failed_read_is_a_tool_error_and_no_read(workspace, task, tmp_path):
    (workspace / "README.md").unlink()
    _, run, metrics = run_policy(task, workspace, tmp_path / "run", "nothing")

    assert run.exit_code == 0
    assert metrics.tool_errors == 1
    assert metrics.read_paths == [] and metrics.docs_read == []


def test_unknown_decoy_is_refused_before_running(workspace, task, tmp_path):
    with pytest.raises(ValueError, match="no decoy 'nope'"):
        run_policy(task, workspace, tmp_path / "run", "decoy", decoy="nope")


def test_hang_is_killed_with_its_whole_group(workspace, task, tmp_path):
    run_dir = tmp_path / "run"
    result: dict[str, AgentRun] = {}

    def target() -> None:
        result["run"] = run_policy(task, workspace, run_dir, "hang", timeout=2, stall_s=60)[1]

    thread = threading.Thread(target=target)
    thread.start()
    # Find the lingering child while the agent hangs, so the check below cannot pass vacuously.
    pgid = child = None
    while child is None and thread.is_alive():
        events = read_jsonl(run_dir / "session.jsonl")
        pgid = events[0]["pid"] if events else None
        if pgid is not None:
            child = next((p for p in live_group_members(pgid) if cmdline(p) == ["sleep", "3600"]), None)
        time.sleep(0.05)
    thread.join(timeout=20)

    assert pgid is not None and child is not None, "the hang policy never started its child"
    run = result["run"]
    assert run.timed_out and not run.stalled
    assert run.exit_code is None
    assert run.wall_s < 10
    assert wait_for_group_exit(pgid) == []


def test_stall_is_detected_by_the_silence_watchdog(workspace, task, tmp_path):
    start = time.monotonic()
    harness, run, metrics = run_policy(task, workspace, tmp_path / "run", "stall", timeout=30, stall_s=1)

    assert run.stalled and not run.timed_out
    assert run.exit_code is None
    assert time.monotonic() - start < 8
    assert metrics.assistant_messages == 1
    assert wait_for_group_exit(header(run)["pid"]) == []


def test_sleep_then_nothing(workspace, task, tmp_path):
    _, run, metrics = run_policy(task, workspace, tmp_path / "run", "sleep", seconds=0.3)

    assert run.exit_code == 0 and run.wall_s >= 0.3
    assert metrics.final_text == agent.FINAL_NOTHING


def test_crash_exits_1_with_a_traceback_and_one_turn(workspace, task, tmp_path):
    harness, run, metrics = run_policy(task, workspace, tmp_path / "run", "crash")

    assert run.exit_code == 1 and not run.timed_out
    stderr = run.stderr_path.read_text()
    assert "Traceback" in stderr and "RuntimeError" in stderr
    assert metrics.assistant_messages == 1
    assert metrics.stop_reasons == ["toolUse"]
    assert metrics.final_text is None
    assert harness.infra_signature(run, metrics) is None


def test_infra_no_turn_is_a_provider_failure(workspace, task, tmp_path):
    harness, run, metrics = run_policy(task, workspace, tmp_path / "run", "infra_no_turn")

    assert run.exit_code == 0
    assert metrics.assistant_messages == 0
    assert metrics.transport_failures == 1
    assert metrics.error_messages == [agent.PROVIDER_ERROR_MESSAGE]
    assert metrics.cost_usd is None and metrics.total_tokens == 0
    assert harness.infra_signature(run, metrics) == "scripted_provider_error"


def test_infra_error_only_records_two_errored_messages(workspace, task, tmp_path):
    harness, run, metrics = run_policy(task, workspace, tmp_path / "run", "infra_error_only")

    assert run.exit_code == 0
    assert metrics.assistant_messages == 2
    assert metrics.stop_reasons == ["error", "error"]
    assert metrics.error_messages == [agent.ERROR_MESSAGE] * 2
    assert metrics.tool_calls == 0 and metrics.total_tokens == 0
    assert metrics.final_text is None
    # Each errored request is a failed attempt, as in Pi; the signature stays provider_error's
    # (two error responses only are the shared only_error_responses rule's).
    assert metrics.transport_failures == 2
    assert harness.infra_signature(run, metrics) is None


def test_flaky_fails_on_attempt_1_and_solves_on_attempt_2(workspace, task, tmp_path):
    before = tree_digest(workspace)
    harness, first, first_metrics = run_policy(task, workspace, tmp_path / "run" / "attempt-1", "flaky")
    assert first_metrics.transport_failures == 1 and first_metrics.assistant_messages == 0
    assert harness.infra_signature(first, first_metrics) == "scripted_provider_error"
    assert tree_digest(workspace) == before

    harness, second, second_metrics = run_policy(task, workspace, tmp_path / "run" / "attempt-2", "flaky")
    assert header(second)["attempt"] == 2
    assert second_metrics.transport_failures == 0 and second_metrics.ran_check_script
    assert harness.infra_signature(second, second_metrics) is None
    code, report = run_check_json(workspace)
    assert code == 0 and report["ok"], report


def test_write_outside_writes_next_to_the_workspace(workspace, task, tmp_path):
    _, run, metrics = run_policy(task, workspace, tmp_path / "run", "write_outside")

    assert run.exit_code == 0
    leaked = workspace.parent / f"outside-{header(run)['pid']}.txt"
    assert leaked.read_text() == "leaked\n"
    assert metrics.tool_calls_by_name == {"bash": 1}


def test_tamper_rigs_the_gate(workspace, task, tmp_path):
    _, run, metrics = run_policy(task, workspace, tmp_path / "run", "tamper")

    assert run.exit_code == 0
    assert "pytest.mark.skip" in (workspace / "conftest.py").read_text()
    assert (workspace / "sitecustomize.py").is_file()
    assert (workspace / "tests/unit/test_fake.py").is_file()
    assert not (workspace / "tests/unit/test_errors.py").exists()
    code, report = run_check_json(workspace)
    assert code == 0 and report == {"ok": True, "failed": [], "results": {}}
    assert metrics.tool_calls_by_name == {"bash": 5}
    # Heredoc bodies are data: writing files is neither reading them nor running the gate.
    assert metrics.read_paths == [] and not metrics.ran_check_script and not metrics.ran_pytest


def test_tamper_plan_comes_from_the_pack():
    builtin = tamper_plan(BUILTIN)
    assert [step.get("write") or f"rm {step['delete']}" for step in builtin] == [
        "conftest.py",
        "sitecustomize.py",
        "scripts/check.py",
        "rm tests/unit/test_errors.py",
        "tests/unit/test_fake.py",
    ]
    notes = tamper_plan(load_pack(REPO_ROOT / "packs" / "notes-js"))
    assert [step.get("write") or f"rm {step['delete']}" for step in notes] == [
        ".npmrc",
        "node_modules/x/index.js",
        "scripts/check.mjs",
        "rm test/api/health-users.test.mjs",
        "test/api/fake.test.mjs",
    ]
    assert "process.exit(0)" in notes[2]["content"] and 'from "node:test"' in notes[4]["content"]


def test_script_runs_each_command_as_one_bash_turn(workspace, task, tmp_path):
    commands = ["echo one > one.txt", "false", "cat one.txt && cat missing.txt"]
    _, run, metrics = run_policy(task, workspace, tmp_path / "run", "script", commands=commands)

    assert run.exit_code == 0
    assert (workspace / "one.txt").read_text() == "one\n"
    assert metrics.tool_calls_by_name == {"read": 1, "bash": 3}
    assert metrics.bash_commands == commands
    # `cat missing.txt` printed "No such file or directory": it read nothing.
    assert metrics.read_paths == ["README.md", "one.txt"]
    # Each command's own exit code is recorded; a failing command is not a failed tool call.
    assert tool_exit_codes(run) == [0, 0, 1, 1]
    assert metrics.tool_errors == 0
    assert metrics.final_text == agent.FINAL_DONE
    saved = json.loads((tmp_path / "run" / SCRIPT_COPY).read_text())
    assert saved == {"commands": commands}


@pytest.mark.parametrize("policy", ["solution", "decoy", "script", "nothing"])
def test_no_path_into_the_repository_reaches_the_agent(workspace, task, tmp_path, policy):
    options = {"decoy": "full_page_heuristic"} if policy == "decoy" else {}
    if policy == "script":
        options = {"commands": ["true"]}
    _, run, _ = run_policy(task, workspace, tmp_path / "run", policy, **options)

    assert run.exit_code == 0
    # The interpreter and the agent's own script are the only repository paths on its command line
    # (the sandbox shows them); inputs are copies in the run directory.
    script = str(Path(agent.__file__).resolve())
    leaked = [a for a in run.command if str(REPO_ROOT) in a and a != script and not a.startswith(sys.prefix)]
    assert leaked == []


@pytest.mark.parametrize(
    "commands", [None, [], "echo hi", ["echo hi", 3]], ids=["missing", "empty", "string", "not-str"]
)
def test_script_needs_a_list_of_commands(workspace, task, tmp_path, commands):
    options = {} if commands is None else {"commands": commands}
    with pytest.raises(ValueError, match="needs harness_options\\['commands'\\]"):
        run_policy(task, workspace, tmp_path / "run", "script", **options)


def test_unknown_policy_exits_2_with_one_line(workspace, task, tmp_path):
    harness, run, metrics = run_policy(task, workspace, tmp_path / "run", "bogus")

    assert run.exit_code == 2
    assert len(run.stderr_path.read_text().splitlines()) == 1
    assert run.session_path is None
    assert metrics == Metrics()


def test_parent_environment_does_not_reach_the_agent(workspace, task, tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    _, run, _ = run_policy(task, workspace, tmp_path / "run", "nothing")

    assert run.exit_code == 0
    assert header(run)["env_ci"] is None


def test_parse_session_is_a_pure_function_of_the_files(workspace, task, tmp_path):
    harness, run, judged = run_policy(task, workspace, tmp_path / "run", "nothing")
    metrics = harness.parse_session(run)
    assert judge(metrics, task.pack.spec) == judged

    copies = tmp_path / "copies"
    copies.mkdir()
    moved = run.model_copy(
        update={
            name: Path(shutil.copy(getattr(run, name), copies))
            for name in ("session_path", "stdout_path", "stderr_path")
        }
    )
    assert ScriptedHarness(task).parse_session(moved) == metrics

    # A torn last line (the agent killed mid-write) is ignored.
    with moved.session_path.open("a") as session:
        session.write('{"type": "message", "message": {"role": "assis')
    assert harness.parse_session(moved) == metrics

    moved.session_path.write_text("")
    assert harness.parse_session(moved) == Metrics()
    assert harness.parse_session(moved.model_copy(update={"session_path": None})) == Metrics()


@pytest.mark.parametrize(
    ("name", "attempt"), [("attempt-1", 1), ("attempt-12", 12), ("run", 1), ("attempt-x", 1)]
)
def test_attempt_number_comes_from_the_run_dir_name(name, attempt):
    assert attempt_number(Path("/runs") / name) == attempt

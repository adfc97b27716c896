"""The Claude Code adapter: parsing captured sessions, and the real CLI driven by the mock model."""

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from conftest import run_check_json

from harnesses.base import AgentRun, Condition, Metrics
from harnesses.claude_code import (
    INFRA_SIGNATURE,
    ClaudeCodeHarness,
    context_mapping,
    install_skills,
    parse_files,
    thinking_args,
)
from harnesses.cli import Provider
from harnesses.mock_model.anthropic_messages import SIDE_TEXT, SIDE_TURN, AnthropicMessages
from harnesses.mock_model.policy import Policy, Step
from harnesses.mock_model.server import MockModelServer, Usage
from harnesses.mock_model.session import LEDGER_FILE
from rig.classify import classify
from rig.tasks import Task
from rig.workspace import tree_digest

DATA = Path(__file__).parent / "data" / "claude_code"
# A line of the fixture's AGENTS.md that no other context file holds.
AGENTS_MARK = "Endpoints need three pieces"
SKILL = "tasks/t5_migration/skill"
SKILL_NAME = "taskapp-migration"
SOLUTION_USAGE = {"input": 1000, "output": 100, "cache_read": 500, "cache_write": 30}
CHECK_COMMAND = "python scripts/check.py"


def saved_run(folder: Path, *, stdout: bool = True, transcript: bool = True) -> AgentRun:
    """An AgentRun pointing at captured files, as `rig reclassify` rebuilds one from a record."""
    return AgentRun(
        command=json.loads((folder / "command.json").read_text()),
        exit_code=0,
        timed_out=False,
        stalled=False,
        wall_s=1.0,
        session_path=folder / "session.jsonl" if transcript else None,
        stdout_path=folder / "stdout.log" if stdout else folder / "missing.log",
        stderr_path=folder / "stderr.log",
    )


def ledger(run_dir: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Usage totals and tool calls of the main conversation, from the mock's saved ledger."""
    entries = json.loads((run_dir / LEDGER_FILE).read_text())["ledger"]
    served = [e for e in entries if e["outcome"] == "served" and e["turn"] != SIDE_TURN]
    totals = {
        key: sum(e["usage"][key] for e in served) for key in ("input", "output", "cache_read", "cache_write")
    }
    tools: dict[str, int] = {}
    for entry in served:
        if entry["tool"]:
            tools[entry["tool"]] = tools.get(entry["tool"], 0) + 1
    return totals, tools


def parsed_usage(metrics: Metrics) -> dict[str, int]:
    return {
        "input": metrics.input_tokens,
        "output": metrics.output_tokens,
        "cache_read": metrics.cache_read_tokens,
        "cache_write": metrics.cache_write_tokens,
    }


# --- captured sessions ------------------------------------------------------------------------


def test_success_session_parses_to_exact_metrics(task):
    folder = DATA / "success"
    harness = ClaudeCodeHarness(task, Provider(), None, None, 30)
    run = saved_run(folder)
    metrics = harness.parse_session(run)

    patch = (task.solution_patch).read_text()
    assert metrics == Metrics(
        model="claude-opus-4-8",
        thinking_level="medium",
        assistant_messages=4,
        tool_calls=3,
        tool_calls_by_name={"Read": 1, "Bash": 2},
        tool_errors=0,
        input_tokens=4000,
        output_tokens=400,
        cache_read_tokens=2000,
        cache_write_tokens=120,
        reasoning_tokens=0,
        total_tokens=6520,
        cost_usd=0.03175,
        cost_source="harness",
        stop_reasons=["tool_use", "tool_use", "tool_use", "end_turn"],
        error_messages=[],
        transport_failures=0,
        bash_commands=[
            f"git apply --whitespace=nowarn <<'RIG_PATCH_EOF'\n{patch}RIG_PATCH_EOF",
            CHECK_COMMAND,
        ],
        bash_search_commands=[],
        read_paths=["README.md"],
        docs_read=["README.md"],
        ran_check_script=True,
        ran_pytest=False,
        read_skill=False,
        final_text="Done: the change is applied and checked.",
    )
    assert harness.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, 30).is_infra
    # What Claude Code reported equals what the mock served.
    totals, tools = ledger(folder)
    assert parsed_usage(metrics) == totals
    assert metrics.tool_calls_by_name == tools


def test_api_error_session_is_an_infrastructure_failure(task):
    harness = ClaudeCodeHarness(task, Provider(), None, None, 30)
    run = saved_run(DATA / "api_error").model_copy(update={"exit_code": 1})
    metrics = harness.parse_session(run)

    assert metrics.assistant_messages == 1 and metrics.tool_calls == 0
    assert metrics.stop_reasons == ["error"]
    assert metrics.transport_failures == 1
    assert len(metrics.error_messages) == 1
    assert metrics.error_messages[0].startswith("API Error: 500 mock provider error (HTTP 500).")
    assert metrics.total_tokens == 0 and metrics.cost_usd == 0.0 and metrics.cost_source == "harness"
    assert metrics.final_text is None
    # No real response: the model named is the one Claude Code was started with.
    assert metrics.model == "claude-opus-4-8[1m]"
    assert harness.infra_signature(run, metrics) == INFRA_SIGNATURE
    verdict = classify(run, metrics, harness.infra_signature(run, metrics), 30)
    assert verdict.is_infra and verdict.rule == INFRA_SIGNATURE


def test_retried_request_counts_as_a_transport_failure_of_a_scored_run(task):
    harness = ClaudeCodeHarness(task, Provider(), None, None, 30)
    run = saved_run(DATA / "retry")
    metrics = harness.parse_session(run)

    assert metrics.transport_failures == 1
    assert metrics.error_messages == ["retry 1/1: overloaded (HTTP 529)"]
    assert metrics.tool_calls_by_name == {"Read": 1}
    assert metrics.final_text == "Nothing to change."
    assert harness.infra_signature(run, metrics) is None
    totals, tools = ledger(DATA / "retry")
    assert parsed_usage(metrics) == totals and metrics.tool_calls_by_name == tools


def test_either_file_alone_gives_the_same_counts(task):
    folder = DATA / "success"
    full = parse_files(folder / "stdout.log", folder / "session.jsonl", [])
    stream_only = parse_files(folder / "stdout.log", None, [])
    transcript_only = parse_files(None, folder / "session.jsonl", [])

    counted = ("tool_calls_by_name", "bash_commands", "read_paths", "stop_reasons", "assistant_messages")
    for partial in (stream_only, transcript_only):
        assert partial.model_dump(include=set(counted)) == full.model_dump(include=set(counted))
    assert parsed_usage(stream_only) == parsed_usage(full)
    # Without the result event, the transcript's final per-response usage gives the same totals.
    assert parsed_usage(transcript_only) == parsed_usage(full)
    assert transcript_only.cost_usd is None and transcript_only.final_text == full.final_text


def test_parse_is_a_pure_function_of_the_files(task, tmp_path):
    harness = ClaudeCodeHarness(task, Provider(), None, None, 30)
    original = harness.parse_session(saved_run(DATA / "success"))
    copy = Path(shutil.copytree(DATA / "success", tmp_path / "copy"))
    run = saved_run(copy)
    assert harness.parse_session(run) == original

    # A torn last line (the CLI killed mid-write) is skipped.
    for name in ("stdout.log", "session.jsonl"):
        with (copy / name).open("a") as handle:
            handle.write('{"type": "assistant", "message": {"id": "msg_')
    assert harness.parse_session(run) == original

    for name in ("stdout.log", "session.jsonl"):
        (copy / name).write_text("")
    assert harness.parse_session(run) == Metrics(thinking_level="medium")
    missing = run.model_copy(update={"session_path": None, "stdout_path": copy / "nope.log", "command": []})
    assert harness.parse_session(missing) == Metrics()
    assert harness.infra_signature(missing, Metrics()) is None


# --- condition mapping ------------------------------------------------------------------------


def test_agents_md_is_imported_from_the_config_dir(tmp_path):
    work, config = tmp_path / "work", tmp_path / "config"
    work.mkdir()
    config.mkdir()
    assert context_mapping(work, config) is None
    assert not (config / "CLAUDE.md").exists()

    (work / "AGENTS.md").write_text("rules\n")
    mapping = context_mapping(work, config)
    assert mapping == f"AGENTS.md imported via CLAUDE_CONFIG_DIR/CLAUDE.md (@{work.resolve()}/AGENTS.md)"
    assert (config / "CLAUDE.md").read_text() == f"@{work.resolve()}/AGENTS.md\n"
    assert sorted(p.name for p in work.iterdir()) == ["AGENTS.md"]

    other = tmp_path / "config2"
    other.mkdir()
    (work / "CLAUDE.md").write_text("own rules\n")
    assert context_mapping(work, other) == "CLAUDE.md read natively; AGENTS.md present but not imported"
    (work / "AGENTS.md").unlink()
    assert context_mapping(work, other) == "CLAUDE.md read natively"
    assert not (other / "CLAUDE.md").exists()


def test_skills_are_installed_under_their_declared_name(tmp_path):
    assert install_skills([SKILL], tmp_path) == [SKILL_NAME]
    assert (tmp_path / "skills" / SKILL_NAME / "SKILL.md").is_file()
    with pytest.raises(ValueError, match="has no SKILL.md"):
        install_skills(["tasks/t1_fix_pagination"], tmp_path)


@pytest.mark.parametrize(
    ("level", "args"),
    [
        ("low", ["--effort", "low"]),
        ("max", ["--effort", "max"]),
        ("minimal", ["--effort", "low"]),
        ("off", ['--settings={"alwaysThinkingEnabled":false}']),
    ],
)
def test_thinking_levels_map_to_claude_options(level, args):
    assert thinking_args(level) == args


def test_unknown_thinking_level_is_refused_before_running(task):
    with pytest.raises(ValueError, match="no thinking level 'turbo'"):
        ClaudeCodeHarness(task, Provider(), None, "turbo", 30)


# --- the wire protocol ------------------------------------------------------------------------


def sse_payloads(events: list[bytes]) -> list[dict]:
    payloads = []
    for event in events:
        lines = event.decode().strip().splitlines()
        assert lines[0] == f"event: {json.loads(lines[1][len('data: ') :])['type']}"
        payloads.append(json.loads(lines[1][len("data: ") :]))
    return payloads


MAIN_REQUEST = {
    "model": "claude-x",
    "stream": True,
    "system": [{"type": "text", "text": "env\n - Primary working directory: /w/ork\n"}],
    "tools": [{"name": "Bash"}],
    "messages": [
        {"role": "user", "content": "go"},
        {"role": "system", "content": "listing"},
        {"role": "assistant", "content": []},
        {"role": "user", "content": []},
    ],
}


def test_protocol_streams_a_tool_call_with_the_usage_given():
    protocol = AnthropicMessages()
    assert protocol.turn(MAIN_REQUEST) == 1
    events = sse_payloads(
        protocol.events(Step("read", path="README.md"), Usage(11, 22, 33, 44, 5), MAIN_REQUEST, "r1")
    )

    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0]["message"]["usage"] == {
        "input_tokens": 11,
        "cache_creation_input_tokens": 44,
        "cache_read_input_tokens": 33,
        "output_tokens": 0,
    }
    assert events[1]["content_block"] == {"type": "tool_use", "id": "toolu_r1", "name": "Read", "input": {}}
    assert json.loads(events[2]["delta"]["partial_json"]) == {"file_path": "/w/ork/README.md"}
    assert events[4]["delta"]["stop_reason"] == "tool_use" and events[4]["usage"] == {"output_tokens": 22}
    assert protocol.tool_name(Step("shell", command="ls")) == "Bash"
    assert protocol.tool_name(Step("write", path="x", content="y")) == "Write"
    assert protocol.tool_name(Step("final", text="t")) is None


def test_protocol_answers_non_streaming_and_side_requests():
    protocol = AnthropicMessages()
    plain = {**MAIN_REQUEST, "stream": False}
    assert protocol.content_type(plain) == "application/json"
    (body,) = protocol.events(Step("final", text="done"), Usage(1, 2, 3, 4, 0), plain, "r2")
    message = json.loads(body)
    assert message["content"] == [{"type": "text", "text": "done"}]
    assert message["stop_reason"] == "end_turn" and message["usage"]["output_tokens"] == 2

    side = {"model": "claude-haiku", "stream": True, "system": "Summarise.", "messages": [{"role": "user"}]}
    assert protocol.turn(side) == SIDE_TURN
    events = sse_payloads(protocol.events(Step("shell", command="rm -rf x"), Usage(), side, "r3"))
    assert events[2]["delta"] == {"type": "text_delta", "text": SIDE_TEXT}
    assert events[0]["message"]["usage"]["input_tokens"] == 0 and events[4]["usage"]["output_tokens"] == 0
    assert protocol.error_body(529) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "mock provider error (HTTP 529)"},
    }
    assert protocol.error_body(500)["error"]["type"] == "api_error"


# --- the real CLI against the mock ------------------------------------------------------------


def run_claude(
    task: Task,
    workdir: Path,
    run_dir: Path,
    options: dict,
    *,
    stall_s: float = 30,
    timeout: int = 120,
    provider: Provider | None = None,
    **condition: object,
) -> tuple[ClaudeCodeHarness, AgentRun, Metrics]:
    harness = ClaudeCodeHarness(task, provider or Provider(kind="mock"), None, None, stall_s)
    run = harness.run(
        workdir,
        task.spec.prompt,
        Condition(name="test", harness_options=options, **condition),
        run_dir,
        timeout,
    )
    return harness, run, harness.parse_session(run)


@pytest.mark.slow
def test_solution_replay_succeeds_and_matches_the_ledger(workspace, task, tmp_path):
    run_dir = tmp_path / "run" / "attempt-1"
    harness, run, metrics = run_claude(task, workspace, run_dir, {"mock_usage": SOLUTION_USAGE})

    assert run.exit_code == 0 and not run.timed_out and not run.stalled
    assert "Claude Code" in harness.version()
    code, report = run_check_json(workspace)
    assert code == 0 and report["ok"], report
    totals, tools = ledger(run_dir)
    assert totals == {key: 4 * value for key, value in SOLUTION_USAGE.items()}
    assert parsed_usage(metrics) == totals
    assert metrics.tool_calls_by_name == tools == {"Read": 1, "Bash": 2}
    assert metrics.tool_errors == 0 and metrics.ran_check_script and metrics.docs_read == ["README.md"]
    assert metrics.final_text == "Done: the change is applied and checked."
    assert harness.infra_signature(run, metrics) is None
    # The transcript is saved next to the streams, and parsing needs nothing else.
    assert run.session_path == run_dir / "session.jsonl"
    copies = Path(shutil.copytree(run_dir, tmp_path / "copy"))
    moved = run.model_copy(
        update={"session_path": copies / "session.jsonl", "stdout_path": copies / "stdout.log"}
    )
    shutil.rmtree(run_dir)
    assert harness.parse_session(moved) == metrics


@pytest.mark.slow
def test_nothing_changes_nothing_and_fails_verification(workspace, task, tmp_path):
    before = tree_digest(workspace)
    harness, run, metrics = run_claude(task, workspace, tmp_path / "run", {"mock_policy": "nothing"})

    assert run.exit_code == 0
    # The AGENTS.md mapping lives in the config dir: the workspace stays byte for byte the same.
    assert tree_digest(workspace) == before
    assert metrics.tool_calls_by_name == {"Read": 1} and metrics.final_text == "Nothing to change."
    assert not classify(run, metrics, harness.infra_signature(run, metrics), 30).is_infra
    code, _ = run_check_json(workspace)
    assert code != 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "stall_s", "rule", "bound_s"),
    [
        ({"mock_faults": {"mode": "down"}}, 30, INFRA_SIGNATURE, 15),
        ({"mock_faults": {"mode": "http_error", "status": 500}}, 30, INFRA_SIGNATURE, 15),
        ({"mock_faults": {"mode": "never_answer"}, "api_timeout_ms": 2000}, 30, INFRA_SIGNATURE, 20),
        ({"mock_faults": {"mode": "silence"}}, 3, "stalled", 15),
    ],
    ids=["server_down", "http_500", "never_answer", "silent_stream"],
)
def test_provider_failures_are_infrastructure_within_seconds(
    workspace, task, tmp_path, options, stall_s, rule, bound_s
):
    start = time.monotonic()
    harness, run, metrics = run_claude(task, workspace, tmp_path / "run", options, stall_s=stall_s)
    elapsed = time.monotonic() - start

    verdict = classify(run, metrics, harness.infra_signature(run, metrics), stall_s)
    assert verdict.is_infra and verdict.rule == rule, (verdict, metrics.error_messages)
    assert elapsed < bound_s
    assert metrics.tool_calls == 0


def process_environ(workdir: Path, deadline_s: float) -> dict[str, str]:
    """The environment of the first process found running in `workdir` (from /proc)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if os.readlink(proc / "cwd") != str(workdir):
                    continue
                raw = (proc / "environ").read_bytes()
            except OSError:
                continue
            return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
        time.sleep(0.05)
    raise AssertionError(f"no process ran in {workdir}")


@pytest.mark.slow
def test_parent_environment_does_not_reach_the_cli(workspace, task, tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "parent-token")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "parent-config"))
    result: dict[str, AgentRun] = {}
    # A silent server keeps the CLI alive long enough to read its environment.
    thread = threading.Thread(
        target=lambda: result.update(
            run=run_claude(
                task, workspace, tmp_path / "run", {"mock_faults": {"mode": "silence"}}, stall_s=3
            )[1]
        )
    )
    thread.start()
    try:
        env = process_environ(workspace.resolve(), 10)
    finally:
        thread.join(timeout=30)

    assert "CI" not in env and "ANTHROPIC_AUTH_TOKEN" not in env
    assert env["CLAUDE_CONFIG_DIR"] == str(tmp_path / "run" / "config")
    assert env["HOME"] == str(tmp_path / "run" / "home")
    assert env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    assert result["run"].stalled


class RecordingMessages(AnthropicMessages):
    """The real protocol, keeping every request body so a test can see what the model was sent."""

    def __init__(self) -> None:
        self.requests: list[dict] = []

    def turn(self, request: dict) -> int:
        self.requests.append(request)
        return super().turn(request)


@pytest.mark.slow
@pytest.mark.parametrize("agents_md", [True, False], ids=["agents_md", "no_agents_md"])
def test_condition_reaches_the_model(workspace, task, tmp_path, monkeypatch, agents_md):
    if not agents_md:
        (workspace / "AGENTS.md").unlink()
    protocol = RecordingMessages()
    monkeypatch.setenv("RIG_TEST_CLAUDE_KEY", "test-key")
    with MockModelServer(Policy("answer", (Step("final", text="ok"),)), protocols=[protocol]) as server:
        # The real-provider path, pointed at a recording mock.
        provider = Provider(
            kind="real", name="recorder", base_url=server.base_url, api_key_env="RIG_TEST_CLAUDE_KEY"
        )
        options = (
            dict(skills=[SKILL], tools=["bash", "read", "edit", "write"], thinking="low") if agents_md else {}
        )
        harness, run, metrics = run_claude(
            task, workspace, tmp_path / "run", {}, provider=provider, **options
        )

    assert run.exit_code == 0 and metrics.final_text == "ok"
    (request,) = [r for r in protocol.requests if r.get("tools")]
    first_message = json.dumps(request["messages"][0])
    assert (AGENTS_MARK in first_message) is agents_md
    assert not (workspace / "CLAUDE.md").exists()
    if agents_md:
        assert harness.condition_mapping is not None
        assert harness.condition_mapping.startswith("AGENTS.md imported via CLAUDE_CONFIG_DIR/CLAUDE.md")
        assert f"skills installed in CLAUDE_CONFIG_DIR/skills: {SKILL_NAME}" in harness.condition_mapping
        assert "tools: --tools=Bash,Read,Edit,Write,Skill" in harness.condition_mapping
        assert sorted(t["name"] for t in request["tools"]) == ["Bash", "Edit", "Read", "Skill", "Write"]
        assert "Add or change a field on a taskapp model" in json.dumps(request["messages"])
        assert request["output_config"]["effort"] == "low" and metrics.thinking_level == "low"
    else:
        assert harness.condition_mapping is None
        assert SKILL_NAME not in json.dumps(request)
        assert metrics.thinking_level is None

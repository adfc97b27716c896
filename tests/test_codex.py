"""The Codex adapter: parsing runs captured from real Codex, and the real CLI driven by the mock model."""

import json
import time
import tomllib
from pathlib import Path

import pytest
from builtin_pack import BUILTIN
from conftest import run_check_json
from mock_ledger import TOKENS, captured_patch_command, ledger, parsed_tokens

from harnesses.cli import NODE_BIN
from harnesses.cli_harness import install_skill
from harnesses.codex.adapter import (
    MOCK_KEY_ENV,
    MOCK_TOOLS,
    REASONING_EFFORTS,
    STREAM_IDLE_TIMEOUT_MS,
    CodexHarness,
    add_file_patch,
    read_jsonl,
    toml,
    tool_switches,
)
from harnesses.codex.session import (
    COST_SOURCE,
    TURN_FAILED_SIGNATURE,
    parse_files,
    price,
    read_transcript,
    signature,
)
from harnesses.mock_model.openai_responses import OpenAIResponses, usage_body
from harnesses.mock_model.policy import Policy, Step
from harnesses.mock_model.server import MockModelServer, Usage
from rig.paths import REPO_ROOT
from rig.schema import AgentRun, Condition, Metrics, Provider, Task
from rig.session.shell import judge
from rig.store.migrate import COMPACTION_FIELDS
from rig.verify.classify import classify
from rig.workspace.build import tree_digest

# The mock reports reasoning tokens, which this harness records.
KEYS = (*TOKENS, "reasoning")
DATA = Path(__file__).parent / "data" / "codex"
SKILL = "tasks/t5_migration/skill"
SKILL_NAME = "taskapp-migration"
# The usage the captured runs were served with (see tests/data/codex/README.md).
CAPTURED = Usage(input=1000, output=100, cache_read=500, cache_write=40, reasoning=20)
# genai-prices 0.2.3's gpt-5.5, USD per million tokens: input 5, cached input 0.5, output 30; a cache
# write (OpenAI has no such price) costs as input.
GPT55 = {"input": 5.0, "cache_read": 0.5, "cache_write": 5.0, "output": 30.0}
STALL_S = 30.0
# A provider failure must end a run in seconds; Codex starts in about half a second.
FAULT_WALL_S = 15.0


def captured(case: str, exit_code: int = 0) -> AgentRun:
    """The AgentRun of a captured run, as `rig reclassify` rebuilds it from stored files."""
    folder = DATA / case
    return AgentRun(
        command=["codex"],
        exit_code=exit_code,
        timed_out=False,
        stalled=False,
        wall_s=1.0,
        session_path=folder / "session.jsonl",
        stdout_path=folder / "stdout.log",
        stderr_path=folder / "stderr.log",
    )


def gpt55_cost(usage: Usage, responses: int) -> float:
    per_response = (
        usage.input * GPT55["input"]
        + usage.cache_read * GPT55["cache_read"]
        + usage.cache_write * GPT55["cache_write"]
        + usage.output * GPT55["output"]
    )
    return responses * per_response / 1e6


def harness(task: Task, provider: Provider | None = None, model: str | None = None) -> CodexHarness:
    return CodexHarness(task, provider or Provider(), model, "high", STALL_S)


def tool_outputs(session: Path) -> list[str]:
    """The output text of every tool call in a rollout, in order."""
    return [
        str(e["payload"]["output"])
        for e in read_jsonl(session)
        if e.get("type") == "response_item"
        and e["payload"].get("type") in ("function_call_output", "custom_tool_call_output")
    ]


class RecordingResponses(OpenAIResponses):
    """The real Responses protocol, keeping every request body so a test can read what Codex sent."""

    def __init__(self) -> None:
        super().__init__(MOCK_TOOLS)
        self.requests: list[dict] = []

    def events(self, step: Step, usage: Usage, request: dict, response_id: str) -> list[bytes]:
        self.requests.append(request)
        return super().events(step, usage, request, response_id)


# --- parse_session on runs captured from real Codex ---------------------------------------------


def test_captured_success_parses_exactly(task):
    run = captured("success")
    codex = harness(task)
    metrics = codex.parse_session(run)

    assert metrics.model == "gpt-5.5"
    assert metrics.thinking_level == "high"
    assert metrics.assistant_messages == 11
    assert metrics.tool_calls == 10
    assert metrics.tool_calls_by_name == {"exec_command": 8, "apply_patch": 2}
    # The patch that could not write `docs` (a directory) failed to run; `cat does-not-exist.txt`
    # ran and exited 1, which is the command's failure, not the tool's.
    assert metrics.tool_errors == 1
    assert metrics.input_tokens == 11 * CAPTURED.input
    assert metrics.output_tokens == 11 * CAPTURED.output
    assert metrics.cache_read_tokens == 11 * CAPTURED.cache_read
    assert metrics.cache_write_tokens == 11 * CAPTURED.cache_write
    assert metrics.reasoning_tokens == 11 * CAPTURED.reasoning
    assert metrics.total_tokens == 11 * (CAPTURED.input + CAPTURED.cache_read + CAPTURED.cache_write + 100)
    assert metrics.cost_usd == pytest.approx(gpt55_cost(CAPTURED, 11), abs=1e-9)
    assert metrics.cost_source == COST_SOURCE == "genai-prices 0.2.3"
    assert metrics.stop_reasons == ["completed"]
    assert metrics.error_messages == [] and metrics.transport_failures == 0
    assert metrics.bash_commands == [
        "cat AGENTS.md",
        "grep -rn 'has_next' taskapp | head -3",
        "sed -n 40,45p taskapp/utils/pagination.py",
        "cat does-not-exist.txt",
        captured_patch_command(task.solution_patch.read_text()),
        "python scripts/check.py",
        "python -m pytest -q tests/unit 2>&1 | tail -1",
        'echo "CI=$CI"',
    ]
    assert metrics.bash_search_commands == ["grep -rn 'has_next' taskapp | head -3"]
    # `cat does-not-exist.txt` printed "No such file or directory": it read nothing.
    assert metrics.read_paths == ["AGENTS.md", "taskapp/utils/pagination.py"]
    assert metrics.ran_pytest and not metrics.read_skill
    # Docs, gate and tests are the pack's to judge: the parser leaves them unset.
    judged = judge(metrics, BUILTIN.spec)
    assert judged.docs_read == ["AGENTS.md"] and judged.ran_check_script and judged.ran_tests
    assert metrics.final_text == "Fixed: has_next now compares with <."
    assert codex.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, STALL_S).is_infra
    # The parsed tokens and tool calls equal what the mock served.
    totals, tools = ledger(DATA / "success", KEYS)
    assert parsed_tokens(metrics, KEYS) == totals
    assert metrics.tool_calls_by_name == tools
    # The gate passed inside the agent's shell (the rig's python), and the parent's CI=true did
    # not reach the agent.
    outputs = tool_outputs(DATA / "success" / "session.jsonl")
    assert any(o.endswith("check passed\n") for o in outputs)
    assert outputs[-1].endswith("Output:\nCI=\n")


VERSIONS = sorted(p.name for p in (DATA / "versions").iterdir() if p.is_dir())
# Tool errors of each captured version's run: the patch that cannot write `docs`; Codex 0.80 gives
# the unknown slug gpt-5.5 no apply_patch tool, so both of its patches are unsupported calls.
VERSION_TOOL_ERRORS = {"0.40.0": 1, "0.80.0": 2, "0.125.0": 1, "0.171.0": 1}
# The versions whose rollout records each response's usage with its cache writes apart
# (`token_usage_record`): the pinned one.
RECORDS_CACHE_WRITES = {"0.171.0"}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_reproduces_the_mock_ledger(version):
    """Rollouts of older Codex versions record usage only as `token_count` events (running totals,
    each announced twice on 0.125): the parser reads them into the ledger's numbers. Those versions
    record no cache writes apart, so the mock's cache writes are inside their input. The pinned
    version records them apart, and its figures are the ledger's exactly."""
    folder = DATA / "versions" / version
    metrics = parse_files(folder / "session.jsonl", folder / "stdout.log")
    assert json.loads((folder / "version.json").read_text())["codex"] == version
    records = any(e.get("type") == "token_usage_record" for e in read_jsonl(folder / "session.jsonl"))
    assert records is (version in RECORDS_CACHE_WRITES)
    totals, tools = ledger(folder, KEYS)
    parsed = parsed_tokens(metrics, KEYS)
    if not records:
        assert parsed.pop("cache_write") == 0
        assert parsed.pop("input") == totals.pop("input") + totals.pop("cache_write")
    assert parsed == totals and metrics.tool_calls_by_name == tools
    assert metrics.model == "gpt-5.5" and metrics.complete and metrics.gaps == []
    # A successful patch's JSON output ({"output": "Success. ...", "metadata": {"exit_code": 0}})
    # is no tool error; a shell command exiting 1 is none either.
    assert metrics.tool_errors == VERSION_TOOL_ERRORS[version]
    assert metrics.cost_usd == pytest.approx(gpt55_cost(Usage(1040, 100, 500, 0, 20), 11), abs=1e-9)
    assert metrics.final_text == "Fixed: has_next now compares with <."
    # The transcript has one step per response, each with its call and its tokens.
    agent = [
        s
        for s in read_transcript(folder / "session.jsonl", folder / "stdout.log").steps
        if s.source == "agent"
    ]
    assert [len(s.tool_calls) for s in agent] == [1] * 10 + [0]
    step_input = 1000 if records else 1040
    assert {(s.input_tokens, s.output_tokens, s.cache_read_tokens) for s in agent} == {(step_input, 100, 500)}


def test_rollout_without_usage_falls_back_to_the_stream_totals(tmp_path):
    """A rollout whose usage lines are gone: the stream's turn.completed totals give the tokens."""
    folder = DATA / "success"
    kept = [
        line
        for line in (folder / "session.jsonl").read_text().splitlines()
        if '"token_usage_record"' not in line and '"token_count"' not in line
    ]
    (tmp_path / "session.jsonl").write_text("\n".join(kept) + "\n")
    metrics = parse_files(tmp_path / "session.jsonl", folder / "stdout.log")
    full = parse_files(folder / "session.jsonl", folder / "stdout.log")
    tokens = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
    assert metrics.model_dump(include=set(tokens)) == full.model_dump(include=set(tokens))
    assert metrics.complete and metrics.tool_calls == full.tool_calls
    # Without the stream too, a model that called tools and recorded no usage is a gap, not zeros.
    alone = parse_files(tmp_path / "session.jsonl", None)
    assert alone.total_tokens == 0 and not alone.complete


def test_repeated_token_counts_are_one_response(tmp_path):
    def count(total: int) -> dict:
        usage = {"input_tokens": total, "output_tokens": 1, "total_tokens": total + 1}
        info = {"total_token_usage": usage, "last_token_usage": usage}
        return {"type": "event_msg", "payload": {"type": "token_count", "info": info}}

    entries = [
        {"type": "turn_context", "payload": {"model": "gpt-5.5"}},
        {"type": "event_msg", "payload": {"type": "token_count", "info": None}},
        count(10),
        count(10),
        count(30),
    ]
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    metrics = parse_files(path, None)
    assert metrics.assistant_messages == 2 and metrics.input_tokens == 30 and metrics.output_tokens == 1


def test_event_stream_alone_gives_the_same_counts():
    """Without a rollout the stream's items and turn totals give the same counts; model, effort and
    per-response prices are only in the rollout."""
    folder = DATA / "success"
    from_rollout = parse_files(folder / "session.jsonl", folder / "stdout.log")
    from_stream = parse_files(None, folder / "stdout.log")

    assert from_stream.model is None and from_stream.thinking_level is None
    assert from_stream.cost_usd is None and from_stream.cost_source == f"{COST_SOURCE}: no model recorded"
    # The stream records no compaction: unknown without the rollout.
    assert from_stream.compactions is None and from_rollout.compactions == 0
    same = {"model", "thinking_level", "cost_usd", "cost_source", *COMPACTION_FIELDS}
    assert from_stream.model_dump(exclude=same) == from_rollout.model_dump(exclude=same)


def test_stream_turn_totals_equal_the_rollout_records():
    """Codex's own two accounts of usage agree: turn.completed sums the per-response records."""
    folder = DATA / "success"
    [turn] = [e for e in read_jsonl(folder / "stdout.log") if e["type"] == "turn.completed"]
    records = [
        e["payload"]["usage"]
        for e in read_jsonl(folder / "session.jsonl")
        if e["type"] == "token_usage_record"
    ]

    assert len(records) == 11
    for key, value in turn["usage"].items():
        assert value == sum(r[key] for r in records), key
    # What the mock sent for one response, as Codex recorded it.
    assert records[0] == {
        "input_tokens": 1540,
        "cached_input_tokens": 500,
        "cache_write_input_tokens": 40,
        "output_tokens": 100,
        "reasoning_output_tokens": 20,
        "total_tokens": 1640,
    }


def test_torn_last_line_is_skipped(tmp_path):
    lines = (DATA / "success" / "session.jsonl").read_text().splitlines(keepends=True)
    torn = tmp_path / "session.jsonl"
    torn.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])

    metrics = parse_files(torn, None)

    # The last line is task_complete: without it and without a stream, no turn end is known.
    assert metrics.assistant_messages == 11
    assert metrics.stop_reasons == [] and metrics.final_text is None


def test_no_files_at_all_is_no_model_turn(tmp_path, task):
    run = AgentRun(
        command=["codex"],
        exit_code=1,
        timed_out=False,
        stalled=False,
        wall_s=0.5,
        session_path=None,
        stdout_path=tmp_path / "stdout.log",
        stderr_path=tmp_path / "stderr.log",
    )
    codex = harness(task)
    metrics = codex.parse_session(run)

    assert metrics == Metrics()
    assert classify(run, metrics, codex.infra_signature(run, metrics), STALL_S).rule == "no_model_turn"


@pytest.mark.parametrize(
    ("case", "rule", "message"),
    [
        (
            "http_500",
            "codex_internal_server_error",
            "We\u2019re currently experiencing high demand, which may cause temporary errors.",
        ),
        ("server_down", "codex_http_connection_failed", "Connection failed: error sending request"),
    ],
)
def test_captured_provider_failures_are_infrastructure(task, case, rule, message):
    run = captured(case, exit_code=1)
    codex = harness(task)
    metrics = codex.parse_session(run)

    assert metrics.assistant_messages == 0 and metrics.tool_calls == 0
    assert metrics.stop_reasons == ["error"]
    assert metrics.error_messages == [message]
    assert metrics.transport_failures == 1
    assert metrics.total_tokens == 0 and metrics.cost_usd is None
    assert codex.infra_signature(run, metrics) == rule
    verdict = classify(run, metrics, codex.infra_signature(run, metrics), STALL_S)
    assert verdict.is_infra and verdict.rule == rule and verdict.detail == message


def test_captured_cut_stream_ran_its_tool_then_failed(task):
    run = captured("cut_stream", exit_code=1)
    codex = harness(task)
    metrics = codex.parse_session(run)

    # The tool call was complete when the stream broke, so Codex ran it; no response completed.
    assert metrics.tool_calls_by_name == {"exec_command": 1} and metrics.bash_commands == ["cat README.md"]
    assert metrics.assistant_messages == 0 and metrics.total_tokens == 0
    # The cut response's usage never arrived: a gap, not a zero.
    assert not metrics.complete and metrics.gaps == ["no token usage recorded although the model responded"]
    assert metrics.stop_reasons == ["error"] and metrics.transport_failures == 1
    assert codex.infra_signature(run, metrics) == "codex_other"
    assert classify(run, metrics, "codex_other", STALL_S).is_infra


def test_captured_recovered_stream_retry_counts_the_failure_but_is_scored(task):
    run = captured("stream_retry_recovered")
    codex = harness(task)
    metrics = codex.parse_session(run)

    assert metrics.transport_failures == 1
    assert metrics.error_messages == [
        "Reconnecting... 1/1 (stream disconnected before completion: stream closed before response.completed)"
    ]
    assert metrics.stop_reasons == ["completed"] and metrics.final_text == "Nothing to change."
    assert codex.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, STALL_S).is_infra
    totals, tools = ledger(DATA / "stream_retry_recovered", KEYS)
    assert parsed_tokens(metrics, KEYS) == totals
    # The cut response's tool call ran and stayed in the history: the ledger, which counts only
    # responses served in full, does not have it.
    assert tools == {} and metrics.tool_calls_by_name == {"exec_command": 1}


def test_signature_names_the_error_info_and_spares_the_agents_own_failures(tmp_path):
    def rollout(info: object) -> list[dict]:
        path = tmp_path / "rollout.jsonl"
        error = {"message": "m", "codex_error_info": info}
        path.write_text(
            json.dumps({"type": "event_msg", "payload": {"type": "task_complete", "error": error}})
        )
        return read_jsonl(path)

    assert (
        signature(rollout("response_too_many_failed_attempts"), [])
        == "codex_response_too_many_failed_attempts"
    )
    assert signature(rollout({"response_stream_disconnected": {"http_status_code": None}}), []) == (
        "codex_response_stream_disconnected"
    )
    assert signature(rollout("context_window_exceeded"), []) is None
    assert signature(rollout(None), []) == TURN_FAILED_SIGNATURE
    assert signature([], [{"type": "turn.failed", "error": {"message": "x"}}]) == TURN_FAILED_SIGNATURE
    assert signature([], [{"type": "turn.completed"}]) is None
    # Only the turn the run ended on counts: a failure recovered from is no signature.
    completed = {"type": "event_msg", "payload": {"type": "task_complete", "last_agent_message": "ok"}}
    assert signature([*rollout("internal_server_error"), completed], []) is None
    assert signature([], [{"type": "turn.failed", "error": {}}, {"type": "turn.completed"}]) is None


def test_price_needs_a_model_genai_prices_knows():
    usage = {
        "input_tokens": 1540,
        "cached_input_tokens": 500,
        "cache_write_input_tokens": 40,
        "output_tokens": 100,
    }

    assert price([("gpt-5.5", "2026-01-01T00:00:00Z", usage)]) == (
        pytest.approx(gpt55_cost(CAPTURED, 1), abs=1e-12),
        COST_SOURCE,
    )
    assert price([("mock-model", None, usage)]) == (None, f"{COST_SOURCE}: model 'mock-model' not priced")


# --- configuration, without running Codex ---------------------------------------------------------


def test_command_line(task, tmp_path):
    codex = harness(task)
    command = codex.command(tmp_path, "-Fix it.", codex.effort(Condition(name="c", thinking="low")))

    assert command == [
        str(CodexHarness.locate_cli()[1]),
        "exec",
        "--json",
        "--strict-config",
        "--skip-git-repo-check",
        "-C",
        str(tmp_path),
        "--dangerously-bypass-approvals-and-sandbox",
        "-c",
        'model_reasoning_effort="low"',
        "--",
        "-Fix it.",
    ]
    assert codex.effort(Condition(name="d")) == "high"
    assert CodexHarness(task, Provider(), None, None, STALL_S).effort(Condition(name="u")) is None
    assert "-c" not in codex.command(tmp_path, "Go.", None)
    with pytest.raises(ValueError, match="no reasoning effort codex knows"):
        codex.effort(Condition(name="x", thinking="max"))
    assert "xhigh" in REASONING_EFFORTS


def test_config_for_the_mock_and_a_real_provider(task):
    mock = tomllib.loads(toml(harness(task).config("http://127.0.0.1:9/v1", None)))
    assert mock == {
        "model": "gpt-5.5",
        "model_provider": "mock",
        "check_for_update_on_startup": False,
        "model_providers": {
            "mock": {
                "name": "mock",
                "base_url": "http://127.0.0.1:9/v1",
                "wire_api": "responses",
                "env_key": MOCK_KEY_ENV,
                "request_max_retries": 0,
                "stream_max_retries": 0,
                "stream_idle_timeout_ms": STREAM_IDLE_TIMEOUT_MS,
            }
        },
        "analytics": {"enabled": False},
        "feedback": {"enabled": False},
        "features": {"plugins": False, "unbounded_connection_retries": False},
    }
    openai = Provider(kind="real", name="openai", api_key_env="OPENAI_API_KEY")
    real = tomllib.loads(
        toml(harness(task, openai, "gpt-5.1-codex").config("https://api.openai.com/v1", None))
    )
    assert real["model"] == "gpt-5.1-codex" and real["model_provider"] == "rig"
    assert real["model_providers"]["rig"]["env_key"] == "OPENAI_API_KEY"
    assert real["model_providers"]["rig"]["name"] == "openai"
    with pytest.raises(ValueError, match="needs a model"):
        CodexHarness(task, openai, None, None, STALL_S)


def test_tool_lists_map_to_config_switches(task):
    assert tool_switches(None) == []
    everything = ["exec_command", "write_stdin", "apply_patch", "tool_search", "view_image", "web_search"]
    assert tool_switches(everything + ["get_goal", "create_goal", "update_goal", "request_user_input"]) == []
    config = harness(task).config("http://x/v1", ["exec_command", "apply_patch", "tool_search"])
    assert config["features"] == {
        "plugins": False,
        "unbounded_connection_retries": False,
        "view_image": False,
        "goals": False,
    }
    assert config["web_search"] == "disabled"
    assert config["tools"] == {"experimental_request_user_input": {"enabled": False}}
    with pytest.raises(ValueError, match="no tools"):
        tool_switches(["bash", "apply_patch", "tool_search"])
    with pytest.raises(ValueError, match="cannot remove"):
        tool_switches(["exec_command"])


def test_skill_is_copied_under_its_own_name(tmp_path):
    target = install_skill(SKILL, tmp_path / "skills")

    assert target == tmp_path / "skills" / SKILL_NAME
    assert (target / "SKILL.md").read_bytes() == (REPO_ROOT / SKILL / "SKILL.md").read_bytes()
    with pytest.raises(ValueError, match="no SKILL.md"):
        install_skill("tasks/t5_migration", tmp_path / "skills")


def test_mock_protocol_counts_turns_and_translates_steps():
    protocol = OpenAIResponses(MOCK_TOOLS)
    history = [
        {"type": "message", "role": "developer", "content": []},
        {"type": "message", "role": "user", "content": []},
        {"type": "function_call", "call_id": "a", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "..."},
        {"type": "custom_tool_call", "call_id": "b", "name": "apply_patch", "input": "..."},
        {"type": "custom_tool_call_output", "call_id": "b", "output": "..."},
        {"type": "message", "role": "assistant", "content": []},
        {"type": "message", "role": "user", "content": []},
    ]
    assert protocol.turn({"input": history}) == 3
    assert protocol.turn({}) == 0
    calls = [protocol.tool_call(Step(kind), {}) for kind in ("shell", "read", "write", "final")]
    assert [call and call.name for call in calls] == ["exec_command", "exec_command", "apply_patch", None]
    assert (
        add_file_patch("a/b.txt", "x\ny\n") == "*** Begin Patch\n*** Add File: a/b.txt\n+x\n+y\n*** End Patch"
    )
    assert add_file_patch("e.txt", "") == "*** Begin Patch\n*** Add File: e.txt\n*** End Patch"
    assert protocol.error_body(500)["error"]["type"] == "server_error"
    events = [
        json.loads(e.decode().split("data: ", 1)[1])
        for e in protocol.events(Step("final", text="hi"), CAPTURED, {}, "r1")
    ]
    assert [e["type"] for e in events][0] == "response.created" and events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["usage"] == usage_body(CAPTURED)
    assert "".join(e.get("delta", "") for e in events) == "hi"


# --- the real CLI against the mock model ------------------------------------------------------------


@pytest.mark.slow
def test_version_is_the_pinned_cli(task):
    package = NODE_BIN.parent / "@openai" / "codex" / "package.json"
    assert harness(task).version() == f"codex-cli {json.loads(package.read_text())['version']}"


@pytest.mark.slow
def test_solution_succeeds_and_metrics_equal_the_ledger(workspace, task, tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    usage = {"input": 1111, "output": 222, "cache_read": 333, "cache_write": 44, "reasoning": 55}
    condition = Condition(name="solution", harness_options={"mock_usage": usage})
    run_dir = tmp_path / "run"
    codex = harness(task)
    run = codex.run(workspace, task.spec.prompt, condition, run_dir, 120)
    metrics = codex.parse_session(run)

    assert run.exit_code == 0 and not run.timed_out and not run.stalled
    code, report = run_check_json(workspace)
    assert code == 0 and report["ok"], report
    # The rollout was saved where `rig reclassify` looks; CODEX_HOME keeps only its config.
    assert run.session_path == run_dir / "session.jsonl"
    assert read_jsonl(run.session_path)[0]["type"] == "session_meta"
    assert sorted(p.name for p in (run_dir / "codex-home").iterdir()) == ["config.toml", "skills"]
    totals, tools = ledger(run_dir, KEYS)
    assert totals["responses"] == 4
    assert parsed_tokens(metrics, KEYS) == totals
    assert metrics.tool_calls_by_name == tools == {"exec_command": 3}
    assert metrics.total_tokens == 4 * (1111 + 333 + 44 + 222) and metrics.complete
    assert metrics.cost_usd == pytest.approx(gpt55_cost(Usage(**usage), 4), abs=1e-9)
    assert metrics.model == "gpt-5.5" and metrics.thinking_level == "high"
    judged = judge(metrics, BUILTIN.spec)
    assert judged.ran_check_script and judged.docs_read == ["README.md"]
    assert metrics.tool_errors == 0 and metrics.transport_failures == 0
    # The gate ran in the agent's shell with the rig's interpreter (its pinned ruff and pytest).
    assert any(o.endswith("check passed\n") for o in tool_outputs(run.session_path))
    assert codex.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, STALL_S).is_infra
    assert codex.condition_mapping is None
    # Re-parsing from the stored files alone (as reclassify does) gives the same metrics.
    stored = AgentRun(**run.model_dump(exclude={"session_path"}), session_path=run_dir / "session.jsonl")
    assert codex.parse_session(stored) == metrics


@pytest.mark.slow
def test_nothing_changes_nothing(workspace, task, tmp_path):
    before = tree_digest(workspace)
    codex = harness(task)
    run = codex.run(
        workspace,
        task.spec.prompt,
        Condition(name="n", harness_options={"mock_policy": "nothing"}),
        tmp_path / "run",
        120,
    )
    metrics = codex.parse_session(run)

    assert run.exit_code == 0
    assert tree_digest(workspace) == before
    assert metrics.tool_calls_by_name == {"exec_command": 1} and metrics.assistant_messages == 2
    assert metrics.final_text == "Nothing to change."
    assert not classify(run, metrics, codex.infra_signature(run, metrics), STALL_S).is_infra


@pytest.mark.slow
@pytest.mark.parametrize(
    ("faults", "rule"),
    [
        ({"mode": "down"}, "codex_http_connection_failed"),
        ({"mode": "http_error", "status": 500}, "codex_internal_server_error"),
    ],
)
def test_provider_failure_is_infrastructure_within_seconds(workspace, task, tmp_path, faults, rule):
    condition = Condition(name="f", harness_options={"mock_faults": faults})
    codex = harness(task)
    start = time.monotonic()
    run = codex.run(workspace, task.spec.prompt, condition, tmp_path / "run", 120)
    metrics = codex.parse_session(run)
    elapsed = time.monotonic() - start

    assert elapsed < FAULT_WALL_S
    assert run.exit_code == 1 and not run.stalled
    verdict = classify(run, metrics, codex.infra_signature(run, metrics), STALL_S)
    assert verdict.is_infra and verdict.rule == rule


@pytest.mark.slow
def test_environment_skills_tools_and_agents_md_reach_codex_as_configured(
    workspace, task, tmp_path, monkeypatch
):
    """Through the real-provider path, with a recording server: what Codex sent and what its shell saw."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("RIG_PARENT_ONLY", "leaked")
    monkeypatch.setenv("RIG_TEST_KEY", "test-key")
    protocol = RecordingResponses()
    policy = Policy("env", (Step("shell", command='echo "CI=$CI"; env | sort'), Step("final", text="ok")))
    tools = ["exec_command", "apply_patch", "tool_search", "web_search"]
    condition = Condition(name="e", skills=[SKILL], tools=tools, thinking="low")
    with MockModelServer(policy, protocols=[protocol]) as server:
        provider = Provider(
            kind="real", name="mock", base_url=f"{server.base_url}/v1", api_key_env="RIG_TEST_KEY"
        )
        codex = CodexHarness(task, provider, "gpt-5.5", None, STALL_S)
        run = codex.run(workspace, "Look around.", condition, tmp_path / "run", 120)
    metrics = codex.parse_session(run)

    assert run.exit_code == 0 and metrics.final_text == "ok"
    [output] = tool_outputs(run.session_path)
    assert "\nCI=\n" in output and "RIG_PARENT_ONLY" not in output
    assert f"CODEX_HOME={tmp_path / 'run' / 'codex-home'}" in output
    first = protocol.requests[0]
    assert first["reasoning"]["effort"] == "low" and metrics.thinking_level == "low"
    sent_tools = {t.get("name") or t.get("type") for t in first["tools"]}
    assert sent_tools == {"exec_command", "write_stdin", "apply_patch", "tool_search", "web_search"}
    texts = [
        c.get("text", "") for item in first["input"] if item.get("type") == "message" for c in item["content"]
    ]
    skills = next(t for t in texts if "<skills_instructions>" in t)
    assert f"- {SKILL_NAME}: " in skills and str(tmp_path / "run" / "codex-home" / "skills") in skills
    assert any(t.startswith("# AGENTS.md instructions for") for t in texts)
    assert codex.condition_mapping == (
        f"skills copied to $CODEX_HOME/skills/: {SKILL_NAME}; tools removed by config: "
        "create_goal, get_goal, request_user_input, update_goal, view_image"
    )
    assert (tmp_path / "run" / "codex-home" / "skills" / SKILL_NAME / "SKILL.md").is_file()


@pytest.mark.slow
def test_without_agents_md_codex_sees_none(workspace, task, tmp_path, monkeypatch):
    monkeypatch.setenv("RIG_TEST_KEY", "test-key")
    (workspace / "AGENTS.md").unlink()
    protocol = RecordingResponses()
    with MockModelServer(Policy("f", (Step("final", text="ok"),)), protocols=[protocol]) as server:
        provider = Provider(
            kind="real", name="mock", base_url=f"{server.base_url}/v1", api_key_env="RIG_TEST_KEY"
        )
        run = CodexHarness(task, provider, "gpt-5.5", None, STALL_S).run(
            workspace, "Hello.", Condition(name="n"), tmp_path / "run", 120
        )

    assert run.exit_code == 0
    sent = json.dumps(protocol.requests[0]["input"])
    assert "AGENTS.md instructions" not in sent and "check.py` is the gate" not in sent

"""The Gemini CLI adapter: parsing runs captured from real Gemini CLI, and the real CLI driven by the
mock model."""

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from builtin_pack import BUILTIN
from conftest import run_check_json
from mock_ledger import TOKENS, captured_patch_command, ledger, parsed_tokens

from harnesses.cli import NODE_BIN
from harnesses.gemini.adapter import (
    API_ERROR_SIGNATURE,
    COST_SOURCE,
    MOCK_COST,
    MOCK_COST_SOURCE,
    MOCK_MODEL,
    MOCK_TOOLS,
    NO_CACHE_WRITE_GAP,
    NO_CACHED_GAP,
    STREAM_ONLY_GAP,
    TRUNCATED_SIGNATURE,
    GeminiHarness,
    core_tools,
    parse_files,
    price,
    read_session,
    thinking_config,
)
from harnesses.logs import read_jsonl
from harnesses.mock_model.gemini import Gemini, wire_usage
from harnesses.mock_model.policy import Policy, Step
from harnesses.mock_model.server import PATH_PARAMS, MockModelServer, Usage
from harnesses.mock_model.session import LEDGER_FILE
from rig.confine.keygate import PLACEHOLDER
from rig.schema import AgentRun, Condition, Metrics, Provider, Task
from rig.session.shell import judge
from rig.verify.classify import classify
from rig.workspace.build import tree_digest

# The mock reports reasoning tokens, which this harness records.
KEYS = (*TOKENS, "reasoning")
DATA = Path(__file__).parent / "data" / "gemini"
SKILL = "tasks/t5_migration/skill"
SKILL_NAME = "taskapp-migration"
# The usage the captured runs were served with (see tests/data/gemini/README.md).
CAPTURED = Usage(input=1000, output=100, cache_read=500, cache_write=0, reasoning=20)
STALL_S = 30.0
# A provider failure must end a run in seconds; Gemini CLI starts in about two.
FAULT_WALL_S = 15.0


def captured(case: str, exit_code: int = 0, folder: Path | None = None) -> AgentRun:
    """The AgentRun of a captured run, as `rig reclassify` rebuilds it from stored files."""
    folder = folder or DATA / case
    return AgentRun(
        command=["gemini"],
        exit_code=exit_code,
        timed_out=False,
        stalled=False,
        wall_s=1.0,
        session_path=folder / "session.jsonl",
        stdout_path=folder / "stdout.log",
        stderr_path=folder / "stderr.log",
    )


def mock_cost(usage: Usage, responses: int) -> float:
    per_response = (
        usage.input * MOCK_COST["input"]
        + usage.cache_read * MOCK_COST["cache_read"]
        + usage.output * MOCK_COST["output"]
    )
    return responses * per_response / 1e6


def harness(task: Task, provider: Provider | None = None, model: str | None = None) -> GeminiHarness:
    return GeminiHarness(task, provider or Provider(), model, "high", STALL_S)


def tool_outputs(session: Path) -> list[str]:
    """What every tool call of a session returned to the model, in order."""
    return [
        str(part["functionResponse"]["response"].get("output", ""))
        for message in read_session(session)
        for call in message.get("toolCalls") or []
        for part in call.get("result") or []
    ]


class RecordingGemini(Gemini):
    """The real Gemini protocol, keeping every request body so a test can read what Gemini CLI sent."""

    def __init__(self) -> None:
        super().__init__(MOCK_TOOLS)
        self.requests: list[dict] = []

    def events(self, step: Step, usage: Usage, request: dict, response_id: str) -> list[bytes]:
        self.requests.append(request)
        return super().events(step, usage, request, response_id)


# --- parse_session on runs captured from real Gemini CLI ----------------------------------------


def test_captured_success_parses_exactly(task):
    run = captured("success")
    gemini = harness(task)
    metrics = gemini.parse_session(run)

    assert metrics.model == MOCK_MODEL == "gemini-2.5-pro"
    assert metrics.thinking_level == "high"
    assert metrics.assistant_messages == 12
    assert metrics.tool_calls == 11
    assert metrics.tool_calls_by_name == {"read_file": 2, "run_shell_command": 7, "write_file": 2}
    # Reading missing.md and writing `docs` (a directory) failed in the tool; `cat
    # does-not-exist.txt` ran and exited 1, which is the command's failure, not the tool's.
    assert metrics.tool_errors == 2
    assert metrics.input_tokens == 12 * CAPTURED.input
    assert metrics.output_tokens == 12 * CAPTURED.output
    assert metrics.cache_read_tokens == 12 * CAPTURED.cache_read
    assert metrics.cache_write_tokens == 0
    assert metrics.reasoning_tokens == 12 * CAPTURED.reasoning
    assert metrics.total_tokens == 12 * (CAPTURED.input + CAPTURED.cache_read + CAPTURED.output)
    assert metrics.cost_usd == pytest.approx(mock_cost(CAPTURED, 12), abs=1e-12)
    assert metrics.cost_source == MOCK_COST_SOURCE
    assert metrics.stop_reasons == ["completed"]
    assert metrics.error_messages == [] and metrics.transport_failures == 0
    task_patch = task.solution_patch.read_text()
    assert metrics.bash_commands == [
        "grep -rn 'has_next' taskapp | head -3",
        "sed -n 40,45p taskapp/utils/pagination.py",
        "cat does-not-exist.txt",
        captured_patch_command(task_patch),
        "python scripts/check.py",
        "python -m pytest -q tests/unit 2>&1 | tail -1",
        'echo "CI=$CI"',
    ]
    assert metrics.bash_search_commands == ["grep -rn 'has_next' taskapp | head -3"]
    # The failing `cat` and the failed read_file read nothing; the attempt is kept for the audit.
    assert metrics.read_paths == ["AGENTS.md", "taskapp/utils/pagination.py"]
    assert metrics.read_attempts == ["AGENTS.md", "missing.md"]
    assert metrics.ran_pytest and not metrics.read_skill
    # Docs, gate and tests are the pack's to judge: the parser leaves them unset.
    judged = judge(metrics, BUILTIN.spec)
    assert judged.docs_read == ["AGENTS.md"] and judged.ran_check_script and judged.ran_tests
    assert metrics.final_text == "Fixed: has_next now compares with <."
    assert gemini.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, STALL_S).is_infra
    # The parsed tokens and tool calls equal what the mock served.
    totals, tools = ledger(DATA / "success", KEYS)
    assert parsed_tokens(metrics, KEYS) == totals
    assert metrics.tool_calls_by_name == tools
    # The gate passed in the agent's shell, and the parent's CI=true did not reach the agent.
    outputs = tool_outputs(DATA / "success" / "session.jsonl")
    assert any("check passed" in o for o in outputs)
    assert "CI=\n" in outputs[-1]


def test_session_keeps_each_message_once_in_its_last_state():
    """Gemini CLI writes a model message again once its tool calls ran: one response, not two."""
    records = read_jsonl(DATA / "success" / "session.jsonl")
    written = [r for r in records if r.get("type") == "gemini"]
    messages = [m for m in read_session(DATA / "success" / "session.jsonl") if m["type"] == "gemini"]

    assert len(written) == 23 and len(messages) == 12
    assert all(m.get("toolCalls") for m in messages[:-1]) and "toolCalls" not in messages[-1]
    # The opening context (a `$set` of the message list) carries AGENTS.md's text.
    assert "--- Context from: <RUNS>/success/work/AGENTS.md ---" in json.dumps(
        read_session(DATA / "success" / "session.jsonl")[0]
    )


def test_event_stream_alone_gives_the_same_behaviour():
    """Without a session the stream's tool events and totals stand in; it has no per-response
    records (responses, thoughts, cost) and no tool output of read_file."""
    folder = DATA / "success"
    from_session = parse_files(folder / "session.jsonl", folder / "stdout.log")
    from_stream = parse_files(None, folder / "stdout.log")

    same = ("tool_calls", "tool_calls_by_name", "tool_errors", "bash_commands", "read_attempts", "final_text")
    for field in same:
        assert getattr(from_stream, field) == getattr(from_session, field), field
    assert from_stream.model == MOCK_MODEL and from_stream.assistant_messages == 0
    assert from_stream.input_tokens == from_session.input_tokens
    assert from_stream.cache_read_tokens == from_session.cache_read_tokens
    # The stream's totals count the candidates only, without the thoughts: a gap, saying so.
    assert from_stream.output_tokens == from_session.output_tokens - from_session.reasoning_tokens
    assert not from_stream.complete and from_stream.gaps == [STREAM_ONLY_GAP, NO_CACHE_WRITE_GAP]


GEMINI_VERSIONS = ("0.18.4", "0.40.1", "0.61.0")


@pytest.mark.parametrize("version", GEMINI_VERSIONS)
def test_versions_reproduce_the_mock_ledger(version):
    """Every Gemini CLI version's files give the mock's ledger, cache writes inside input (Gemini
    has no such field). 0.18 writes a `.json` session recording every tool call on the first
    response and two responses in all, which the adapter does not read: the stream's totals stand
    in, with input holding the cached tokens and output without the thoughts, and the record is
    incomplete, saying so."""
    folder = DATA / "versions" / version
    assert json.loads((folder / "version.json").read_text())["gemini"] == version
    session = folder / "session.jsonl"
    metrics = parse_files(session if session.exists() else None, folder / "stdout.log")
    totals, tools = ledger(folder, KEYS)
    parsed = parsed_tokens(metrics, KEYS)
    assert metrics.tool_calls_by_name == tools == {"read_file": 1, "run_shell_command": 4, "write_file": 1}
    assert metrics.final_text == "Fixed: has_next now compares with <." and metrics.model == MOCK_MODEL
    assert parsed.pop("cache_write") == 0
    input_tokens = totals.pop("input") + totals.pop("cache_write")
    if version == "0.18.4":
        assert not session.exists() and list(folder.glob("home/.gemini/tmp/*/chats/session-*.json"))
        assert not metrics.complete
        assert metrics.gaps == [STREAM_ONLY_GAP, NO_CACHED_GAP, NO_CACHE_WRITE_GAP]
        assert parsed.pop("responses") == 0 and totals.pop("responses") == 7
        reasoning = totals.pop("reasoning")
        assert parsed.pop("reasoning") == 0
        assert parsed.pop("output") == totals.pop("output") - reasoning
        assert parsed.pop("cache_read") == 0
        assert parsed.pop("input") == input_tokens + totals.pop("cache_read")
        return
    assert metrics.complete and metrics.gaps == [NO_CACHE_WRITE_GAP]
    assert parsed.pop("input") == input_tokens and parsed == totals


def test_no_files_at_all_is_no_model_turn(tmp_path, task):
    run = captured("none", exit_code=1, folder=tmp_path)
    gemini = harness(task)
    metrics = gemini.parse_session(run)

    assert metrics == Metrics()
    assert classify(run, metrics, gemini.infra_signature(run, metrics), STALL_S).rule == "no_model_turn"


@pytest.mark.parametrize(
    ("case", "exit_code", "message"),
    [
        (
            "http_500",
            244,
            "[API Error: " + json.dumps(Gemini(MOCK_TOOLS).error_body(500), separators=(",", ":")) + "]",
        ),
        ("server_down", 1, "[API Error: exception TypeError: fetch failed sending request]"),
    ],
)
def test_captured_provider_failures_are_infrastructure(task, case, exit_code, message):
    run = captured(case, exit_code=exit_code)
    gemini = harness(task)
    metrics = gemini.parse_session(run)

    assert metrics.assistant_messages == 0 and metrics.tool_calls == 0
    assert metrics.stop_reasons == ["error"]
    assert metrics.error_messages == [message]
    assert metrics.transport_failures == 1
    assert metrics.total_tokens == 0 and metrics.cost_usd is None
    # One attempt only: the adapter's settings switch Gemini CLI's retries off.
    served = json.loads((DATA / case / LEDGER_FILE).read_text())["ledger"]
    assert len(served) == (1 if case == "http_500" else 0)
    assert gemini.infra_signature(run, metrics) == API_ERROR_SIGNATURE
    verdict = classify(run, metrics, gemini.infra_signature(run, metrics), STALL_S)
    assert verdict.is_infra and verdict.rule == API_ERROR_SIGNATURE and verdict.detail == message


def test_captured_cut_stream_is_taken_as_complete_and_is_infrastructure(task):
    run = captured("cut_stream")
    gemini = harness(task)
    metrics = gemini.parse_session(run)

    # The function call had arrived when the stream broke: Gemini CLI ran it and went on, and
    # recorded the response without tokens.
    assert metrics.tool_calls_by_name == {"read_file": 1, "run_shell_command": 2}
    assert metrics.assistant_messages == 4 and metrics.stop_reasons == ["completed"]
    assert metrics.transport_failures == 1
    totals, tools = ledger(DATA / "cut_stream", KEYS)
    assert totals["responses"] == 3 and tools == {"run_shell_command": 2}
    assert metrics.input_tokens == totals["input"] and metrics.output_tokens == totals["output"]
    assert gemini.infra_signature(run, metrics) == TRUNCATED_SIGNATURE
    assert classify(run, metrics, TRUNCATED_SIGNATURE, STALL_S).is_infra


def test_the_agents_own_failures_are_no_provider_failure(tmp_path, task):
    """A run that ends on the turn limit (an error `result` of the agent's doing) is scored."""
    result = {
        "type": "result",
        "status": "error",
        "error": {"type": "FatalTurnLimitedError", "message": "Reached max session turns"},
    }
    (tmp_path / "stdout.log").write_text(json.dumps(result) + "\n")
    run = captured("turns", exit_code=53, folder=tmp_path)
    gemini = harness(task)
    metrics = gemini.parse_session(run)

    assert metrics.stop_reasons == ["error"] and metrics.transport_failures == 0
    assert gemini.infra_signature(run, metrics) is None


def test_tool_pending_only_once_the_response_ended(tmp_path, task):
    """Cut the captured success where the patch command ran: pending while the command runs
    (its response recorded, no result yet), not while the response that calls it still streams."""
    stream = (DATA / "success" / "stdout.log").read_text().splitlines(keepends=True)
    session = (DATA / "success" / "session.jsonl").read_text().splitlines(keepends=True)
    use = next(i for i, line in enumerate(stream) if "git apply" in line and '"tool_use"' in line)
    call_id = json.loads(stream[use])["tool_id"]
    # The session up to the model message of that call, as first written (without toolCalls).
    first = next(i for i, line in enumerate(session) if call_id in line)
    message = json.loads(session[first - 2])
    assert message["type"] == "gemini" and "toolCalls" not in message
    (tmp_path / "stdout.log").write_text("".join(stream[: use + 1]))
    gemini = harness(task)

    (tmp_path / "session.jsonl").write_text("".join(session[: first - 1]))
    assert gemini.tool_pending(captured("running", folder=tmp_path)) is True
    (tmp_path / "session.jsonl").write_text("".join(session[: first - 3]))
    assert gemini.tool_pending(captured("streaming", folder=tmp_path)) is False
    assert gemini.tool_pending(captured("success")) is False


def test_price_for_the_mock_and_with_genai_prices():
    messages = read_session(DATA / "success" / "session.jsonl")

    cost, by_model, source = price(messages, mock=True)
    assert cost == pytest.approx(mock_cost(CAPTURED, 12), abs=1e-12) and source == MOCK_COST_SOURCE
    assert by_model == {MOCK_MODEL: cost}
    # genai-prices 0.2.3's gemini-2.5-pro up to 200k tokens: input 1.25, cached 0.125, output 10
    # USD per million tokens (thoughts are output).
    cost, by_model, source = price(messages, mock=False)
    assert source == COST_SOURCE == "genai-prices 0.2.3" and by_model == {MOCK_MODEL: cost}
    assert cost == pytest.approx(12 * (1000 * 1.25 + 500 * 0.125 + 100 * 10) / 1e6, abs=1e-12)
    renamed = [{**m, "model": "mock-model"} if m["type"] == "gemini" else m for m in messages]
    assert price(renamed, mock=False) == (None, {}, f"{COST_SOURCE}: model 'mock-model' not priced")


# --- configuration, without running Gemini CLI ----------------------------------------------------


def test_command_line(task):
    assert harness(task).command("-Fix it.") == [
        str(GeminiHarness.locate_cli()[1]),
        "--prompt=-Fix it.",
        "--model",
        MOCK_MODEL,
        "--output-format",
        "stream-json",
        "--approval-mode",
        "yolo",
        "--skip-trust",
    ]


def test_settings_switch_off_everything_that_reaches_out(task):
    settings = GeminiHarness(task, Provider(), None, None, STALL_S).settings(Condition(name="c"))

    assert settings == {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "model": {"name": MOCK_MODEL, "disableLoopDetection": True, "skipNextSpeakerCheck": True},
        "general": {
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
            "maxAttempts": 1,
            "retryFetchErrors": False,
        },
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "ide": {"enabled": False},
        "tools": {"sandbox": False, "useRipgrep": False, "shell": {"enableInteractiveShell": False}},
        "context": {"fileName": "AGENTS.md"},
    }


def test_tools_become_the_core_allow_list(task):
    assert core_tools(None, skills=True) is None
    assert core_tools([], skills=False) == []
    assert core_tools(["read_file", "run_shell_command"], skills=True) == [
        "read_file",
        "run_shell_command",
        "activate_skill",
    ]
    with pytest.raises(ValueError, match=r"gemini has no tools \['bash'\]"):
        core_tools(["bash", "read_file"], skills=False)
    settings = harness(task).settings(Condition(name="t", tools=["read_file"]))
    assert settings["tools"]["core"] == ["read_file"]


def test_thinking_levels_map_onto_the_model(task):
    assert thinking_config("gemini-2.5-pro", "high") == {"thinkingBudget": 24576}
    assert thinking_config("gemini-2.5-flash", "none") == {"thinkingBudget": 0}
    assert thinking_config("gemini-3-flash-preview", "minimal") == {"thinkingLevel": "MINIMAL"}
    assert thinking_config("gemini-3.1-pro-preview", "2048") == {"thinkingBudget": 2048}
    with pytest.raises(ValueError, match="no budget for gemini-2.5-pro"):
        thinking_config("gemini-2.5-pro", "minimal")
    with pytest.raises(ValueError, match="no thinking level of gemini-3-pro-preview"):
        thinking_config("gemini-3-pro-preview", "xhigh")
    # Refused when the adapter is made, before any run.
    with pytest.raises(ValueError, match="no budget"):
        GeminiHarness(task, Provider(), None, "max", STALL_S)
    settings = harness(task).settings(Condition(name="t", thinking="low"))
    assert settings["modelConfigs"] == {
        "overrides": [
            {
                "match": {"model": MOCK_MODEL},
                "modelConfig": {"generateContentConfig": {"thinkingConfig": {"thinkingBudget": 1024}}},
            }
        ]
    }


def test_a_real_provider_needs_a_model_and_a_key_variable(task):
    with pytest.raises(ValueError, match="needs a model"):
        GeminiHarness(task, Provider(kind="real", name="google", api_key_env="K"), None, None, STALL_S)
    real = GeminiHarness(
        task, Provider(kind="real", name="google", api_key_env="K"), "gemini-3-pro-preview", None, STALL_S
    )
    assert real.key_env() == "GEMINI_API_KEY"
    assert real.settings(Condition(name="r"))["model"]["name"] == "gemini-3-pro-preview"


def test_mock_protocol_counts_turns_and_translates_steps():
    protocol = Gemini(MOCK_TOOLS)
    stream = {PATH_PARAMS: {"model": "m", "method": "streamGenerateContent"}}
    history = [
        {"role": "user", "parts": [{"text": "context"}]},
        {"role": "user", "parts": [{"text": "prompt"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {}}}]},
    ]
    assert protocol.turn({**stream, "contents": history}) == 1 and protocol.turn({}) == 0
    calls = [protocol.tool_call(Step(kind), stream) for kind in ("shell", "read", "write", "final")]
    assert [call and call.name for call in calls] == ["run_shell_command", "read_file", "write_file", None]
    assert not protocol.is_side_request(stream)
    side = {PATH_PARAMS: {"model": "m", "method": "generateContent"}}
    assert protocol.is_side_request(side) and protocol.content_type(side) == "application/json"
    assert protocol.content_type(stream) == "text/event-stream"
    events = [
        json.loads(e.decode().split("data: ", 1)[1])
        for e in protocol.events(Step("shell", command="ls"), CAPTURED, stream, "r1")
    ]
    assert events[0]["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}
    ]
    assert events[-1]["candidates"][0]["finishReason"] == "STOP" and "usageMetadata" not in events[0]
    assert (
        events[-1]["usageMetadata"]
        == wire_usage(CAPTURED)
        == {
            "promptTokenCount": 1500,
            "cachedContentTokenCount": 500,
            "candidatesTokenCount": 80,
            "thoughtsTokenCount": 20,
            "totalTokenCount": 1600,
        }
    )
    assert protocol.error_body(503)["error"] == {
        "code": 503,
        "message": "mock provider error (HTTP 503)",
        "status": "UNAVAILABLE",
    }


def test_server_routes_the_path_pattern_and_answers_side_requests():
    """Through a real server: the model and method come from the path; other paths are 404."""
    policy = Policy("p", (Step("final", text="hi"),))
    with MockModelServer(policy, protocols=[Gemini(MOCK_TOOLS)]) as server:

        def post(path: str) -> tuple[int, str, str]:
            request = urllib.request.Request(f"{server.base_url}{path}", data=b'{"contents": []}')
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status, response.headers["Content-Type"], response.read().decode()
            except urllib.error.HTTPError as error:
                return error.code, "", ""

        status, kind, body = post("/v1beta/models/gemini-x:streamGenerateContent?alt=sse")
        assert status == 200 and kind == "text/event-stream" and '"modelVersion":"gemini-x"' in body
        status, kind, body = post("/v1beta/models/gemini-x:generateContent")
        assert status == 200 and kind == "application/json"
        assert json.loads(body)["candidates"][0]["content"]["parts"] == [{"text": "OK"}]
        assert json.loads(post("/v1beta/models/gemini-x:countTokens")[2]) == {"totalTokens": 0}
        assert post("/v1beta/models/a/b:generateContent")[0] == 404
        assert post("/v1/chat/completions")[0] == 404
    assert [e.outcome for e in server.ledger] == ["served", "side", "side"]


# --- the real CLI against the mock model ------------------------------------------------------------


@pytest.mark.slow
def test_version_is_the_pinned_cli(task):
    package = NODE_BIN.parent / "@google" / "gemini-cli" / "package.json"
    assert harness(task).version() == json.loads(package.read_text())["version"]


@pytest.mark.slow
def test_solution_succeeds_and_metrics_equal_the_ledger(workspace, task, tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    usage = {"input": 1111, "output": 222, "cache_read": 333, "cache_write": 0, "reasoning": 55}
    condition = Condition(name="solution", harness_options={"mock_usage": usage})
    run_dir = tmp_path / "run"
    gemini = harness(task)
    run = gemini.run(workspace, task.spec.prompt, condition, run_dir, 120)
    metrics = gemini.parse_session(run)

    assert run.exit_code == 0 and not run.timed_out and not run.stalled
    code, report = run_check_json(workspace)
    assert code == 0 and report["ok"], report
    assert run.session_path == run_dir / "session.jsonl"
    assert read_jsonl(run.session_path)[0]["kind"] == "main"
    totals, tools = ledger(run_dir, KEYS)
    assert totals["responses"] == 4
    assert parsed_tokens(metrics, KEYS) == totals
    assert metrics.tool_calls_by_name == tools == {"read_file": 1, "run_shell_command": 2}
    assert metrics.total_tokens == 4 * (1111 + 333 + 222)
    assert metrics.cost_usd == pytest.approx(mock_cost(Usage(**usage), 4), abs=1e-12)
    assert metrics.model == MOCK_MODEL and metrics.thinking_level == "high"
    judged = judge(metrics, BUILTIN.spec)
    assert judged.ran_check_script and judged.docs_read == ["README.md"]
    assert metrics.tool_errors == 0 and metrics.transport_failures == 0
    assert any("check passed" in o for o in tool_outputs(run.session_path))
    assert gemini.infra_signature(run, metrics) is None
    assert not classify(run, metrics, None, STALL_S).is_infra
    assert gemini.condition_mapping == (
        'AGENTS.md via context.fileName; thinkingConfig {"thinkingBudget": 24576} for gemini-2.5-pro'
    )
    # No side request: the model router, loop detection and next-speaker check are off.
    entries = json.loads((run_dir / LEDGER_FILE).read_text())["ledger"]
    assert {e["outcome"] for e in entries} == {"served"}
    # Re-parsing from the stored files alone (as reclassify does) gives the same metrics.
    stored = AgentRun(**run.model_dump(exclude={"session_path"}), session_path=run_dir / "session.jsonl")
    assert gemini.parse_session(stored) == metrics


@pytest.mark.slow
def test_nothing_changes_nothing(workspace, task, tmp_path):
    before = tree_digest(workspace)
    gemini = harness(task)
    run = gemini.run(
        workspace,
        task.spec.prompt,
        Condition(name="n", harness_options={"mock_policy": "nothing"}),
        tmp_path / "run",
        120,
    )
    metrics = gemini.parse_session(run)

    assert run.exit_code == 0
    assert tree_digest(workspace) == before
    assert metrics.tool_calls_by_name == {"read_file": 1} and metrics.assistant_messages == 2
    assert metrics.final_text == "Nothing to change."
    assert not classify(run, metrics, gemini.infra_signature(run, metrics), STALL_S).is_infra


@pytest.mark.slow
@pytest.mark.parametrize(
    "faults",
    [
        {"mode": "down"},
        {"mode": "http_error", "status": 500},
        {"mode": "http_error", "status": 503},
        {"mode": "http_error", "status": 429},
    ],
)
def test_provider_failure_is_infrastructure_within_seconds(workspace, task, tmp_path, faults):
    condition = Condition(name="f", harness_options={"mock_faults": faults})
    gemini = harness(task)
    start = time.monotonic()
    run = gemini.run(workspace, task.spec.prompt, condition, tmp_path / "run", 120)
    metrics = gemini.parse_session(run)
    elapsed = time.monotonic() - start

    assert elapsed < FAULT_WALL_S
    assert run.exit_code != 0 and not run.stalled
    verdict = classify(run, metrics, gemini.infra_signature(run, metrics), STALL_S)
    assert verdict.is_infra and verdict.rule == API_ERROR_SIGNATURE
    # One request: no retry, and no fallback to another model.
    if faults["mode"] != "down":
        assert len(json.loads((tmp_path / "run" / LEDGER_FILE).read_text())["ledger"]) == 1


@pytest.mark.slow
def test_environment_skills_tools_thinking_and_agents_md_reach_gemini_as_configured(
    workspace, task, tmp_path, monkeypatch
):
    """Through the real-provider path, with a recording server: what Gemini CLI sent and what its
    shell saw."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("RIG_PARENT_ONLY", "leaked")
    monkeypatch.setenv("RIG_TEST_KEY", "test-key")
    (workspace / "GEMINI.md").write_text("GEMINI-MD-MARKER\n")
    protocol = RecordingGemini()
    policy = Policy("env", (Step("shell", command='echo "CI=$CI"; env | sort'), Step("final", text="ok")))
    condition = Condition(name="e", skills=[SKILL], tools=["run_shell_command", "read_file"], thinking="low")
    with MockModelServer(policy, protocols=[protocol]) as server:
        provider = Provider(kind="real", name="google", base_url=server.base_url, api_key_env="RIG_TEST_KEY")
        gemini = GeminiHarness(task, provider, "gemini-3-flash-preview", None, STALL_S)
        run = gemini.run(workspace, "Look around.", condition, tmp_path / "run", 120)
    metrics = gemini.parse_session(run)

    assert run.exit_code == 0 and metrics.final_text == "ok"
    [output] = tool_outputs(run.session_path)
    assert "Output: CI=\n" in output and "RIG_PARENT_ONLY" not in output
    # Gemini CLI hands its own environment to the shell, its key variable included (its redaction
    # is off by default): the placeholder, never the key, which the key gateway holds.
    assert f"\nGEMINI_API_KEY={PLACEHOLDER}\n" in output and "test-key" not in output
    assert f"HOME={tmp_path / 'run' / 'home'}" in output
    first = protocol.requests[0]
    assert first[PATH_PARAMS] == {"model": "gemini-3-flash-preview", "method": "streamGenerateContent"}
    assert first["generationConfig"]["thinkingConfig"] == {"includeThoughts": True, "thinkingLevel": "LOW"}
    assert metrics.thinking_level == "low"
    sent_tools = {f["name"] for t in first["tools"] for f in t["functionDeclarations"]}
    assert sent_tools == {"run_shell_command", "read_file", "activate_skill"}
    system = json.dumps(first["systemInstruction"])
    installed = tmp_path / "run" / "home" / ".gemini" / "skills" / SKILL_NAME
    assert f"<name>{SKILL_NAME}</name>" in system and f"{installed}/SKILL.md" in system
    context = json.dumps(first["contents"])
    assert "Context from: " in context and "/AGENTS.md ---" in context
    # context.fileName adds AGENTS.md to Gemini CLI's names: a GEMINI.md is still read (the
    # fixture holds none).
    assert "/GEMINI.md ---" in context and "GEMINI-MD-MARKER" in context
    assert gemini.condition_mapping == (
        f"AGENTS.md via context.fileName; skills copied to $HOME/.gemini/skills/: {SKILL_NAME}; "
        "tools.core: run_shell_command, read_file, activate_skill; "
        'thinkingConfig {"thinkingLevel": "LOW"} for gemini-3-flash-preview'
    )


@pytest.mark.slow
def test_without_agents_md_gemini_sees_none(workspace, task, tmp_path, monkeypatch):
    monkeypatch.setenv("RIG_TEST_KEY", "test-key")
    (workspace / "AGENTS.md").unlink()
    protocol = RecordingGemini()
    with MockModelServer(Policy("f", (Step("final", text="ok"),)), protocols=[protocol]) as server:
        provider = Provider(kind="real", name="google", base_url=server.base_url, api_key_env="RIG_TEST_KEY")
        run = GeminiHarness(task, provider, "gemini-2.5-flash", None, STALL_S).run(
            workspace, "Hello.", Condition(name="n"), tmp_path / "run", 120
        )

    assert run.exit_code == 0
    sent = json.dumps(protocol.requests[0]["contents"])
    assert "Context from:" not in sent and "check.py` is the gate" not in sent

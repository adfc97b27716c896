"""tool_pending: did a run end while a tool call the agent started was still running?

The rig splits a stalled run on it: silence inside a tool call is the agent's own hang, silence
while the harness waits for the model is the provider's. Each adapter answers from its saved files
alone: sessions captured from the real CLIs (complete, or cut right after a tool call or right after
its result), and the scripted agent run for real.
"""

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harnesses.claude_code.adapter import ClaudeCodeHarness
from harnesses.codex.adapter import CodexHarness
from harnesses.logs import ToolLog, read_jsonl
from harnesses.pi.adapter import PiHarness
from harnesses.scripted.adapter import ScriptedHarness
from rig.schema import AgentRun, Condition, Provider, Task
from rig.verify.classify import classify

DATA = Path(__file__).parent / "data"
Match = Callable[[dict], bool]


def run_of(stdout: Path | None, session: Path | None, tmp_path: Path) -> AgentRun:
    """An AgentRun over saved files, as `rig reclassify` rebuilds one (a missing file is absent)."""
    return AgentRun(
        command=["agent"],
        exit_code=None,
        timed_out=False,
        stalled=True,
        wall_s=1.0,
        session_path=session,
        stdout_path=stdout or tmp_path / "no-stdout.log",
        stderr_path=tmp_path / "no-stderr.log",
    )


def cut_after(source: Path, target: Path, match: Match) -> Path:
    """`source` up to and including its first line that `match`es, written to `target`."""
    lines = source.read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if match(json.loads(line)))
    target.write_text("".join(lines[: index + 1]))
    return target


def blocks(event: dict, kind: str) -> list[dict]:
    message = event.get("message") if isinstance(event.get("message"), dict) else {}
    content = message.get("content") if isinstance(message.get("content"), list) else []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def adapters(task: Task) -> dict[str, PiHarness | ClaudeCodeHarness | CodexHarness]:
    return {
        "pi": PiHarness(task, Provider(), None, None, 30),
        "claude_code": ClaudeCodeHarness(task, Provider(), None, None, 30),
        "codex": CodexHarness(task, Provider(), None, None, 30),
    }


def _pi_call(event: dict) -> bool:
    return event.get("message", {}).get("role") == "assistant" and bool(blocks(event, "toolCall"))


def _pi_result(event: dict) -> bool:
    return event.get("message", {}).get("role") == "toolResult"


# Where each harness's two files are cut: the first tool call's line and its result's line, in
# stdout.log, then in session.jsonl.
CUTS: dict[str, tuple[Match, Match, Match, Match]] = {
    "pi": (
        lambda e: e["type"] == "message_end" and _pi_call(e),
        lambda e: e["type"] == "message_end" and _pi_result(e),
        lambda e: e["type"] == "message" and _pi_call(e),
        lambda e: e["type"] == "message" and _pi_result(e),
    ),
    "claude_code": (
        lambda e: e["type"] == "assistant" and bool(blocks(e, "tool_use")),
        lambda e: e["type"] == "user" and bool(blocks(e, "tool_result")),
        lambda e: e["type"] == "assistant" and bool(blocks(e, "tool_use")),
        lambda e: e["type"] == "user" and bool(blocks(e, "tool_result")),
    ),
    "codex": (
        lambda e: e["type"] == "item.started" and e["item"]["type"] == "command_execution",
        lambda e: e["type"] == "item.completed" and e["item"]["type"] == "command_execution",
        lambda e: e["type"] == "response_item" and e["payload"]["type"] == "function_call",
        lambda e: e["type"] == "response_item" and e["payload"]["type"] == "function_call_output",
    ),
}
SESSION_NAME = "session.jsonl"
STDOUT_NAME = "stdout.log"


@pytest.mark.parametrize("harness", sorted(CUTS))
def test_a_complete_captured_session_has_nothing_pending(task, tmp_path, harness):
    folder = DATA / harness / "success"
    run = run_of(folder / STDOUT_NAME, folder / SESSION_NAME, tmp_path)
    assert adapters(task)[harness].tool_pending(run) is False


@pytest.mark.parametrize("harness", sorted(CUTS))
@pytest.mark.parametrize("files", ["both", "stdout", "session"])
@pytest.mark.parametrize(("point", "pending"), [("call", True), ("result", False)])
def test_a_session_cut_after_a_tool_call_is_pending_and_after_its_result_is_not(
    task, tmp_path, harness, files, point, pending
):
    """Killed while the tool ran: pending. Killed after its result, the harness waiting for the model
    to answer: not pending. Either file alone says the same (the other lost or empty)."""
    folder = DATA / harness / "success"
    stdout_call, stdout_result, session_call, session_result = CUTS[harness]
    stdout_match = stdout_call if point == "call" else stdout_result
    session_match = session_call if point == "call" else session_result
    stdout = session = None
    if files in ("both", "stdout"):
        stdout = cut_after(folder / STDOUT_NAME, tmp_path / STDOUT_NAME, stdout_match)
    if files in ("both", "session"):
        session = cut_after(folder / SESSION_NAME, tmp_path / SESSION_NAME, session_match)
    run = run_of(stdout, session, tmp_path)

    assert adapters(task)[harness].tool_pending(run) is pending


@pytest.mark.parametrize("harness", sorted(CUTS))
def test_a_run_with_no_files_has_nothing_pending(task, tmp_path, harness):
    assert adapters(task)[harness].tool_pending(run_of(None, None, tmp_path)) is False


@pytest.mark.parametrize(
    "case",
    ["pi/provider_error", "pi/retry_recovered", "pi/cut_stream", "claude_code/api_error", "codex/http_500"],
)
def test_captured_failures_leave_nothing_pending(task, tmp_path, case):
    harness, name = case.split("/")
    folder = DATA / harness / name
    run = run_of(folder / STDOUT_NAME, folder / SESSION_NAME, tmp_path)
    assert adapters(task)[harness].tool_pending(run) is False


def test_a_codex_cut_stream_whose_tool_ran_has_nothing_pending(task, tmp_path):
    """The cut response's call ran and has its output, though the response never completed."""
    folder = DATA / "codex" / "cut_stream"
    run = run_of(folder / STDOUT_NAME, folder / SESSION_NAME, tmp_path)
    assert adapters(task)["codex"].tool_pending(run) is False


def test_the_codex_rollout_decides_over_the_stream(task, tmp_path):
    """A command still running after its yield time has its output in the rollout (it went to the
    model) while the stream keeps it in progress: the rollout is the one that is right."""
    folder = DATA / "codex" / "success"
    stdout = cut_after(folder / STDOUT_NAME, tmp_path / STDOUT_NAME, CUTS["codex"][0])
    session = cut_after(folder / SESSION_NAME, tmp_path / SESSION_NAME, CUTS["codex"][3])
    assert adapters(task)["codex"].tool_pending(run_of(stdout, session, tmp_path)) is False


def test_a_claude_subagents_messages_do_not_hide_the_pending_task_call(task, tmp_path):
    """A subagent's responses run inside the main agent's Task call, which is still pending."""
    task_call = {
        "type": "assistant",
        "parent_tool_use_id": None,
        "message": {"id": "msg_1", "content": [{"type": "tool_use", "id": "toolu_task", "name": "Task"}]},
    }
    inner = {
        "type": "assistant",
        "parent_tool_use_id": "toolu_task",
        "message": {"id": "msg_2", "content": [{"type": "tool_use", "id": "toolu_inner", "name": "Bash"}]},
    }
    inner_result = {
        "type": "user",
        "parent_tool_use_id": "toolu_task",
        "message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_inner"}]},
    }
    stdout = tmp_path / STDOUT_NAME
    stdout.write_text("".join(json.dumps(e) + "\n" for e in (task_call, inner, inner_result)))
    assert adapters(task)["claude_code"].tool_pending(run_of(stdout, None, tmp_path)) is True


# --- ToolLog, the rule every adapter shares ------------------------------------------------------


def test_parallel_calls_are_pending_until_every_result_is_back():
    tools = ToolLog()
    tools.response()
    tools.call("a")
    tools.call("b")
    tools.result("b", "", False)
    assert tools.pending
    tools.result("a", "", True)
    assert not tools.pending


def test_a_new_response_ends_what_the_harness_gave_up_on():
    tools = ToolLog()
    tools.response()
    tools.call("lost")
    tools.response()
    assert not tools.pending
    # A call without an id can never get its result: it stays pending until a response follows.
    tools.call(None)
    assert tools.pending


def test_reads_count_only_when_their_result_shows_no_failure():
    tools = ToolLog()
    tools.read("r1", "README.md")
    tools.read("r2", "missing.md")
    tools.shell("s1", "cat a.md b.md")
    tools.shell("s2", "cat c.md", workdir="docs")
    tools.shell("s3", "cat killed.md")
    tools.result("r1", "# README", False)
    tools.result("r2", "ENOENT: no such file or directory", True)
    tools.result("s1", "A\ncat: b.md: No such file or directory\n", True)
    tools.result("s2", "C", False)

    assert tools.read_paths() == ["README.md", "a.md", "docs/c.md", "killed.md"]


# --- the scripted agent, run for real -------------------------------------------------------------


def run_scripted(task: Task, workdir: Path, run_dir: Path, options: dict, stall_s: float) -> AgentRun:
    harness = ScriptedHarness(task, stall_s=stall_s)
    return harness.run(workdir, task.spec.prompt, Condition(name="c", harness_options=options), run_dir, 60)


@pytest.mark.parametrize(
    "command", ["sleep 600", "trap '' TERM; sleep 600"], ids=["sleep", "sleep_ignoring_sigterm"]
)
def test_a_command_that_never_returns_is_a_pending_tool_call(workspace, task, tmp_path, command):
    start = time.monotonic()
    run = run_scripted(task, workspace, tmp_path / "run", {"policy": "script", "commands": [command]}, 2.0)
    harness = ScriptedHarness(task)
    metrics = harness.parse_session(run)

    assert run.stalled and not run.timed_out
    assert time.monotonic() - start < 30
    assert harness.tool_pending(run) is True
    # The session was on disk line by line: the call is there, its result is not.
    assert metrics.bash_commands == [command]
    assert [e["message"]["role"] for e in read_jsonl(run.session_path) if e["type"] == "message"] == [
        "assistant",
        "toolResult",
        "assistant",
    ]
    # The agent's own hang: scored, not quarantined.
    assert not classify(run, metrics, harness.infra_signature(run, metrics), 2.0, tool_pending=True).is_infra


def test_a_model_that_never_answers_leaves_nothing_pending(workspace, task, tmp_path):
    run = run_scripted(task, workspace, tmp_path / "run", {"policy": "stall"}, 2.0)
    harness = ScriptedHarness(task)
    metrics = harness.parse_session(run)

    assert run.stalled and not run.timed_out
    assert metrics.tool_calls == 1
    assert harness.tool_pending(run) is False
    verdict = classify(run, metrics, harness.infra_signature(run, metrics), 2.0, tool_pending=False)
    assert verdict.is_infra and verdict.rule == "stalled_provider"


def test_a_finished_scripted_run_has_nothing_pending(workspace, task, tmp_path):
    run = run_scripted(task, workspace, tmp_path / "run", {"policy": "script", "commands": ["true"]}, 30.0)

    assert run.exit_code == 0
    assert ScriptedHarness(task).tool_pending(run) is False

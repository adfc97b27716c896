"""The mock model server over real HTTP on 127.0.0.1: policies, faults and the ledger."""

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from builtin_pack import FIXTURE_DIR

from harnesses.mock_model import Faults, MockModelServer, Step, Usage
from harnesses.mock_model.policy import Policy
from harnesses.registry import mock_protocols
from rig.packs.manifest import load_pack
from rig.packs.tasks import load_tasks
from rig.paths import REPO_ROOT
from tests.processes import background_job, interrupt

CHAT = "/v1/chat/completions"
POLICY = Policy("two-steps", (Step("shell", command="echo hi"), Step("final", text="Done.")))
# What `rig mock-model serve` serves: the protocol of every calibrated harness, with its tool map.
PROTOCOLS = mock_protocols()


def post(url: str, body: dict, timeout: float = 10) -> tuple[int, str]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def chat(history: int) -> dict:
    messages = [{"role": "user", "content": "go"}]
    messages += [{"role": "assistant", "content": "x"}] * history
    return {"model": "mock-model", "stream": True, "messages": messages}


def test_steps_follow_the_conversation_and_the_ledger_counts_them():
    with MockModelServer(POLICY, PROTOCOLS, usage=Usage(input=10, output=2, cache_read=5)) as server:
        status, first = post(server.base_url + CHAT, chat(0))
        assert status == 200 and '"bash"' in first and "echo hi" in first
        status, again = post(server.base_url + CHAT, chat(0))
        assert again.replace("mock-1", "mock-0") == first  # a retry gets the same step
        status, last = post(server.base_url + CHAT, chat(1))
        assert "Done." in last and last.rstrip().endswith("data: [DONE]")
        assert server.totals() == {
            "input": 30,
            "output": 6,
            "cache_read": 15,
            "cache_write": 0,
            "reasoning": 0,
            "responses": 3,
        }
        assert server.tool_calls() == {"bash": 2}


def test_http_errors_for_the_first_n_requests_then_service():
    with MockModelServer(
        POLICY, PROTOCOLS, faults=Faults(mode="http_error", status=529, first_n=2)
    ) as server:
        outcomes = [post(server.base_url + CHAT, chat(0))[0] for _ in range(3)]
        assert outcomes == [529, 529, 200]
        assert [e.outcome for e in server.ledger] == ["http_error", "http_error", "served"]
        assert server.totals()["responses"] == 1


def test_unknown_paths_are_404():
    with MockModelServer(POLICY, PROTOCOLS) as server:
        assert post(server.base_url + "/v1/embeddings", {})[0] == 404


def test_never_answer_holds_the_request_until_the_server_stops():
    server = MockModelServer(POLICY, PROTOCOLS, faults=Faults(mode="never_answer")).start()
    url = server.base_url + CHAT
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        post(url, chat(0), timeout=1)
    stopper = threading.Timer(0.5, server.stop)
    stopper.start()
    start = time.monotonic()
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        post(url, chat(0), timeout=5)
    assert time.monotonic() - start < 5
    assert [e.outcome for e in server.ledger][:1] == ["never_answer"]


def test_cut_stream_ends_before_the_usage():
    with MockModelServer(POLICY, PROTOCOLS, faults=Faults(mode="cut_stream", after_events=1)) as server:
        status, body = post(server.base_url + CHAT, chat(0))
        assert status == 200
        assert "[DONE]" not in body and '"usage"' not in body
        assert server.totals()["responses"] == 0


def test_a_cut_answer_in_one_body_is_cut_inside_it_and_the_ledger_names_the_model():
    # Claude Code falls back to a non-streaming request after a cut stream: it must be cut too.
    messages = {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    with MockModelServer(POLICY, PROTOCOLS, faults=Faults(mode="cut_stream")) as server:
        status, body = post(server.base_url + "/v1/messages", messages)
        assert status == 200 and body
        with pytest.raises(ValueError):
            json.loads(body)
    with MockModelServer(POLICY, PROTOCOLS) as server:
        status, body = post(server.base_url + "/v1/messages", messages)
        assert status == 200 and json.loads(body)["model"] == "claude-x"
        assert [e.model for e in server.ledger] == ["claude-x"]


def test_an_http_error_says_when_to_retry_in_seconds_and_milliseconds():
    faults = Faults(mode="http_error", status=429, first_n=1)
    with MockModelServer(POLICY, PROTOCOLS, faults=faults) as server:
        request = urllib.request.Request(
            server.base_url + CHAT, json.dumps(chat(0)).encode(), {"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == 429
        assert caught.value.headers["Retry-After"] == "0" and caught.value.headers["retry-after-ms"] == "0"


def test_serve_command_prints_its_url_and_ledger():
    rig = str(Path(sys.executable).with_name("rig"))
    proc = subprocess.Popen(
        [rig, "mock-model", "serve", "--task", "t1_fix_pagination", "--policy", "nothing"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=background_job,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("mock model (nothing) on http://127.0.0.1:")
        url = line.split(" on ")[1].split()[0]
        status, body = post(url + CHAT, chat(0))
        assert status == 200 and '"read"' in body
    finally:
        out, _ = interrupt(proc)
    ledger = json.loads(out)
    assert [(e["protocol"], e["outcome"], e["tool"]) for e in ledger] == [("openai-chat", "served", "read")]


def test_serve_command_speaks_the_tool_names_of_the_harness_asked_for():
    # Pi and OpenCode share the Chat Completions path; each harness's read tool takes its own argument.
    rig = str(Path(sys.executable).with_name("rig"))
    bodies = {}
    for harness in ("pi", "opencode"):
        proc = subprocess.Popen(
            [rig, "mock-model", "serve", "--policy", "nothing", "--harness", harness],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=background_job,
        )
        try:
            url = proc.stdout.readline().split(" on ")[1].split()[0]
            status, bodies[harness] = post(url + CHAT, chat(0))
            assert status == 200
        finally:
            interrupt(proc)
    assert '\\"path\\": \\"README.md\\"' in bodies["pi"]
    assert '\\"filePath\\": \\"README.md\\"' in bodies["opencode"]

    refused = subprocess.run(
        [rig, "mock-model", "serve", "--harness", "scripted"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().startswith(
        "error: harness 'scripted' is not driven by the mock; use one of pi,"
    )


def test_context_sensitive_policy_depends_on_what_reached_the_model():
    from harnesses.mock_model.policy import ContextSensitivePolicy
    from harnesses.mock_model.session import agents_md_marker

    follow = Policy("follow", (Step("final", text="followed"),))
    stray = Policy("stray", (Step("final", text="strayed"),))
    fixture_agents = (FIXTURE_DIR / "AGENTS.md").read_text()
    marker = agents_md_marker(FIXTURE_DIR)
    assert marker in fixture_agents
    keys = [f"run-{i}" for i in range(400)]

    def follow_rate(text: str) -> float:
        chosen = [
            ContextSensitivePolicy("p", follow, stray, 0.9, 0.3, key, marker).resolve(text)[0] for key in keys
        ]
        return sum(c is follow for c in chosen) / len(keys)

    assert 0.85 < follow_rate(f"system: {fixture_agents}") < 0.95
    assert 0.25 < follow_rate("system: no context files") < 0.35
    policy = ContextSensitivePolicy("p", follow, stray, 0.9, 0.3, "run-7", marker)
    assert policy.resolve(fixture_agents) == policy.resolve(fixture_agents)
    _, why = policy.resolve(fixture_agents)
    assert why["context_seen"] is True and why["p"] == 0.9


def test_server_decides_once_per_conversation():
    from harnesses.mock_model.policy import ContextSensitivePolicy

    follow = Policy("follow", (Step("shell", command="echo follow"), Step("final", text="ok")))
    stray = Policy("stray", (Step("shell", command="echo stray"), Step("final", text="ok")))
    policy = ContextSensitivePolicy("p", follow, stray, 1.0, 0.0, "k", marker="MAGIC")
    with MockModelServer(policy, PROTOCOLS) as server:
        body = chat(0)
        body["messages"][0]["content"] = "MAGIC words"
        assert "echo follow" in post(server.base_url + CHAT, body)[1]
        assert "echo follow" in post(server.base_url + CHAT, chat(0))[1]
        assert server.resolution["branch"] == "follow"


def test_context_sensitive_policy_decides_on_the_first_request_that_carries_the_prompt():
    """A harness's side request (a title, a quota check) may come first, without context files:
    it must not decide the branch, nor count as a served response of the agent."""
    from harnesses.mock_model.policy import ContextSensitivePolicy

    follow = Policy("follow", (Step("shell", command="echo follow"), Step("final", text="ok")))
    stray = Policy("stray", (Step("shell", command="echo stray"), Step("final", text="ok")))
    prompt = 'Fix the "pagination"\nbug.\n'
    policy = ContextSensitivePolicy("p", follow, stray, 1.0, 0.0, "k", marker="MAGIC", prompt=prompt)
    with MockModelServer(policy, PROTOCOLS) as server:
        title = {**chat(0), "messages": [{"role": "user", "content": "Write a title for: the bug"}]}
        status, side = post(server.base_url + CHAT, title)
        assert status == 200 and "OK" in side and "echo" not in side
        assert server.resolution is None
        agent = chat(0)
        # The harness trimmed the prompt and put the context file before it; JSON escapes differ.
        agent["messages"][0]["content"] = 'MAGIC rules\n\nFix the "pagination" bug.'
        assert "echo follow" in post(server.base_url + CHAT, agent)[1]
        assert server.resolution is not None and server.resolution["context_seen"] is True
        assert [e.outcome for e in server.ledger] == ["side", "served"]
        assert server.totals()["responses"] == 1 and server.tool_calls() == {"bash": 1}


def test_request_text_holds_every_string_unescaped():
    from harnesses.mock_model.server import request_text

    body = json.loads(json.dumps({"a": ['say "hi"\nnow', {"b": 3, "c": None}], "d": {"e": "x"}}))
    assert request_text(body) == 'say "hi"\nnow\nx'


def test_the_demo_policy_decides_on_the_tasks_prompt(task):
    from harnesses.mock_model.policy import ContextSensitivePolicy
    from harnesses.mock_model.session import policy_for

    policy = policy_for(task, {"mock_policy": "agents_md_sensitive"}, seed_key="run/attempt-1")
    assert isinstance(policy, ContextSensitivePolicy) and policy.prompt == task.spec.prompt
    # The built-in pack's marker: the line of AGENTS.md the policy has always looked for.
    assert policy.marker.startswith("Rules for coding agents working in this repository")
    assert policy.carries_prompt(f"<context>\n{task.spec.prompt.strip()}")
    assert not policy.carries_prompt("Write a five-word title for this conversation.")


def test_policies_run_the_gate_of_the_tasks_pack(task):
    from harnesses.mock_model.policy import ContextSensitivePolicy
    from harnesses.mock_model.session import policy_for

    (js_task,) = load_tasks(load_pack(REPO_ROOT / "packs" / "notes-js"), ["t1_fix_pagination"])
    for each, gate in ((task, "python scripts/check.py"), (js_task, "npm run check")):
        solution = policy_for(each, {"mock_policy": "solution"})
        assert isinstance(solution, Policy)
        assert [s.command for s in solution.steps if s.kind == "shell"][-1] == gate
        sensitive = policy_for(each, {"mock_policy": "agents_md_sensitive"})
        assert isinstance(sensitive, ContextSensitivePolicy)
        assert sensitive.marker in (each.pack.fixture_dir / "AGENTS.md").read_text()
        assert sensitive.follow.steps[-2].command == sensitive.stray.steps[-2].command == gate


def test_the_marker_comes_from_agents_md_or_the_options(task, tmp_path):
    from harnesses.mock_model.session import agents_md_marker, policy_for

    (tmp_path / "AGENTS.md").write_text(
        "# AGENTS.md\n\n  short line\n   Every change runs the gate before it is done.  \n"
    )
    assert agents_md_marker(tmp_path) == "Every change runs the gate before it is done."
    (tmp_path / "AGENTS.md").write_text("# AGENTS.md\nshort\n")
    with pytest.raises(ValueError, match="has no line of 30 characters or more"):
        agents_md_marker(tmp_path)
    (tmp_path / "AGENTS.md").unlink()
    with pytest.raises(ValueError, match="needs the pack's AGENTS.md"):
        agents_md_marker(tmp_path)
    chosen = policy_for(task, {"mock_policy": "agents_md_sensitive", "marker": "MAGIC"})
    assert chosen.marker == "MAGIC"
    with pytest.raises(ValueError, match="marker must be a non-empty string"):
        policy_for(task, {"mock_policy": "agents_md_sensitive", "marker": " "})


# --- what a request asks of the model: its thinking and its tools, as each CLI sends them ----------

# The reasoning parts and tool lists of requests the pinned CLIs sent the mock with thinking "high"
# (and Claude Code's and Gemini CLI's other shapes), read as the provider would.
THINKING_REQUESTS = [
    (
        "openai-chat",
        {"reasoning_effort": "high", "tools": [{"type": "function", "function": {"name": "bash"}}]},
        "high",
        ["bash"],
    ),
    ("openai-chat", {"reasoning": {"effort": "low"}, "tools": []}, "low", []),
    ("openai-chat", {"messages": []}, None, []),
    (
        "openai-responses",
        {
            "reasoning": {"effort": "high"},
            "tools": [{"type": "function", "name": "exec_command"}, {"type": "web_search"}],
        },
        "high",
        ["exec_command", "web_search"],
    ),
    (
        "anthropic-messages",
        {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}, "tools": [{"name": "Bash"}]},
        "high",
        ["Bash"],
    ),
    ("anthropic-messages", {"thinking": {"type": "disabled"}}, "off", []),
    ("anthropic-messages", {"thinking": {"type": "enabled", "budget_tokens": 4096}}, "4096 tokens", []),
    (
        "gemini",
        {
            "generationConfig": {"thinkingConfig": {"includeThoughts": True, "thinkingBudget": 24576}},
            "tools": [{"functionDeclarations": [{"name": "read_file"}, {"name": "glob"}]}],
        },
        "high",
        ["read_file", "glob"],
    ),
    ("gemini", {"generationConfig": {"thinkingConfig": {"thinkingLevel": "LOW"}}}, "low", []),
    ("gemini", {"generationConfig": {"thinkingConfig": {"thinkingBudget": 2000}}}, "2000 tokens", []),
]


@pytest.mark.parametrize(("protocol", "request_body", "thinking", "tools"), THINKING_REQUESTS)
def test_the_ledger_reads_the_thinking_and_tools_a_request_asks_for(protocol, request_body, thinking, tools):
    wire = {p.name: p for p in mock_protocols()}[protocol]
    assert wire.thinking(request_body) == thinking
    assert wire.offered_tools(request_body) == tools


def test_every_served_entry_records_the_requests_thinking_and_tools():
    policy = Policy("one", (Step("final", text="Done."),))
    chat = next(p for p in mock_protocols() if p.name == "openai-chat")
    body = {
        "model": "mock-model",
        "stream": True,
        "reasoning_effort": "medium",
        "tools": [{"type": "function", "function": {"name": "read"}}],
        "messages": [{"role": "user", "content": "go"}],
    }
    with MockModelServer(policy, [chat]) as server:
        request = urllib.request.Request(
            f"{server.base_url}/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
    [entry] = server.ledger
    assert (entry.outcome, entry.thinking, entry.tools) == ("served", "medium", ["read"])

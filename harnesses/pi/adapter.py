"""The Pi adapter: `pi -p --mode json` (@mariozechner/pi-coding-agent) in an isolated agent directory.

Isolation: every run gets its own HOME (`run_dir/home`) and agent directory (`run_dir/agent`,
PI_CODING_AGENT_DIR) holding only `models.json` and `settings.json`; extensions, skill discovery,
prompt templates and themes are off; the environment is built from nothing (`cli.base_env`).

Provider (`models.json`):
- `kind = "mock"`: a provider `mock` (api `openai-completions`) at the mock model's base URL + `/v1`,
  with one model (`model`, default `mock-model`) priced like a mid-range model so Pi computes a cost.
- `kind = "real"` with `base_url`: an entry for `provider.name` with that `baseUrl` and `apiKey` naming
  `api_key_env` (Pi reads a variable name there). For a provider Pi knows (anthropic, openai,
  openrouter, ...) this overrides only its endpoint and key; for another name it defines an
  OpenAI-compatible provider (`openai-completions`) with the one model `model`.
- `kind = "real"` without `base_url`: Pi's built-in provider `provider.name`, unchanged; the key is
  passed in `api_key_env`, which must then be the variable Pi reads for it (ANTHROPIC_API_KEY,
  OPENAI_API_KEY, OPENROUTER_API_KEY, ...). The key never appears on the command line.

`settings.json` turns Pi's own retries and the SDK's retries off and bounds a request's wait for
response headers (`provider_timeout_ms` in the condition's harness_options, default 30 s): a dead
or erroring provider then ends the run in seconds, and the rig quarantines and reruns it.

Conditions: AGENTS.md is a workspace overlay Pi reads natively (from the cwd and its ancestors; the
rig guarantees no ancestor holds one; the agent directory holds none). Each skill directory of
`condition.skills` is copied into `run_dir/skills/<name>` and loaded with `--skill` (discovery stays
off, so nothing else loads): Pi lists it in the system prompt with the copy's SKILL.md path, so the
agent is never pointed into the rig's repository, where solutions and hidden tests live.
`condition.tools` becomes `--tools a,b` (Pi's tool names), an empty list `--no-tools`.

Logs: stdout (`--mode json`) is the event stream, a superset of the session file, which Pi names
`<timestamp>_<uuid>.jsonl` in `--session-dir` and creates only once a first assistant message
exists; the watchdog therefore watches stdout and stderr only, and after the run the session file
is copied to `run_dir/session.jsonl`, which `parse_session` reads (with stdout.log for retry events,
and as the fallback when no session file was written).
"""

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harnesses.cli_harness import CliHarness, install_extension, install_skill, round_cost
from harnesses.factors import Factors, check_condition, mapping, merge
from harnesses.logs import (
    ToolLog,
    as_int,
    derive_behaviour,
    fill_per_model,
    fold_pi_message,
    optional_int,
    pi_live_usage,
    pi_transcript,
    read_jsonl,
    record_compactions,
    unread_usage,
    unreadable_lines,
    usage_gaps,
)
from harnesses.mock_model.openai_chat import OpenAIChat
from harnesses.mock_model.tools import ToolCall, ToolMap
from rig.schema import AgentRun, Condition, Metrics, Provider, Transcript

BIN_ENV = "RIG_PI_BIN"
SESSION_FILE = "session.jsonl"
MOCK_PROVIDER = "mock"
MOCK_MODEL = "mock-model"
MOCK_KEY_ENV = "MOCK_API_KEY"
# USD per million tokens: Pi multiplies usage by these to report a cost, as for a real model.
MOCK_COST = {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75}
DEFAULT_PROVIDER_TIMEOUT_MS = 30_000
INFRA_SIGNATURE = "pi_provider_error"
TRUNCATED_SIGNATURE = "pi_truncated_stream"
COST_SOURCE = "harness"
# The session format versions this parser reads (Pi 0.73.1 writes 3), and the session entries and
# stream events whose usage it reads or that carry none it needs.
SESSION_VERSIONS = frozenset({1, 2, 3})
SESSION_ENTRIES = frozenset({"session", "model_change", "thinking_level_change", "message", "compaction"})
STREAM_EVENTS = frozenset(
    {
        "session",
        "agent_start",
        "agent_end",
        "turn_start",
        "turn_end",
        "message_start",
        "message_update",
        "message_end",
        "tool_execution_start",
        "tool_execution_update",
        "tool_execution_end",
        "auto_retry_start",
        "auto_retry_end",
        "compaction_start",
        "compaction_end",
    }
)
# Pi before 0.60 (pi-ai's openai-completions without `responseId` on its messages) added reasoning
# tokens to `output` though OpenAI's completion tokens include them, and kept cache writes inside
# `cacheRead`; the split is gone from its files (0.60 to 0.69 did the same, with nothing to tell;
# a later Pi's response from a provider that sends no response id would look the same).
LEGACY_USAGE_GAP = (
    "{n} openai-completions responses of a Pi before 0.60: their output holds the reasoning tokens "
    "twice and their cache reads hold the cache writes"
)
# The mock model's steps as Pi's built-in tools (Pi resolves a relative path in its working directory).
MOCK_TOOLS = ToolMap(
    shell=lambda command, cwd: ToolCall("bash", {"command": command}),
    read=lambda path, cwd: ToolCall("read", {"path": path}),
    write=lambda path, content, cwd: ToolCall("write", {"path": path, "content": content}),
)


# harness_settings: the keys of Pi's settings.json that change the agent, not where it logs, which
# model it reaches or how the rig sees provider failures (retry stays the rig's).
SETTINGS_KEYS = frozenset(
    {
        "compaction",
        "branchSummary",
        "thinkingBudgets",
        "images",
        "shellCommandPrefix",
        "steeringMode",
        "followUpMode",
        "hideThinkingBlock",
    }
)
# harness_args: Pi 0.73's options that change neither logs, model, endpoint nor the sandbox.
ARGS = {"--no-context-files": 0, "--no-builtin-tools": 0}
APPENDED_PROMPT = "append-system-prompt.md"


# Pi 0.73.1's usage has no reasoning count: a figure it does not record, its totals exact all the same.
NO_REASONING_GAP = "reasoning tokens not recorded by Pi (they are inside the output tokens)"


def final_answer(event: dict[str, Any]) -> bool:
    """Whether a `--mode json` event ends Pi's run: `agent_end`, after its last response."""
    return event.get("type") == "agent_end"


class PiHarness(CliHarness):
    """A HarnessAdapter for Pi (`pi`), version-pinned in harnesses/node.

    Pi realises AGENTS.md, --skill and --tools natively; `condition_mapping` says what the factors
    beyond the workspace became (None when a condition has none).
    """

    name = "pi"
    package = "@mariozechner/pi-coding-agent"
    binary = "pi"
    bin_env = BIN_ENV
    mock_protocol = OpenAIChat(MOCK_TOOLS)
    mock_key_env = MOCK_KEY_ENV
    mock_url_suffix = "/v1"
    factors = Factors(
        system_prompt=f"--append-system-prompt agent/{APPENDED_PROMPT}",
        settings_file="agent/settings.json",
        settings_keys=SETTINGS_KEYS,
        args=ARGS,
        extensions="copied to agent/extensions/, loaded with --extension",
        thinking="--thinking <level>",
    )
    live_usage = staticmethod(pi_live_usage)
    live_cost = True
    final_event = staticmethod(final_answer)
    usage_fields = frozenset({"input", "output", "cache_read", "cache_write"})
    compaction_fields = frozenset({"compactions", "compaction_tokens_before"})
    # The study's forced arm (experiments/pi_compaction.toml): a reserve the mock's window cannot hold.
    forced_compaction = {
        "harness_settings": {
            "compaction": {"enabled": True, "reserveTokens": 190000, "keepRecentTokens": 2000}
        }
    }
    # An extension whose session_shutdown handler never returns: print mode awaits it after agent_end.
    silent_after_final = {"extensions": [str(Path(__file__).with_name("hold_after_final.mjs"))]}
    lacks = {
        "reasoning": "Pi's session records no reasoning count (pi-ai's usage has none); the reasoning "
        "tokens are inside output",
        "compaction_tokens_after": "Pi's compaction entry records the context's size before it only",
        "compaction_tokens": "Pi records no usage for its summarization requests",
    }

    def default_base_url(self) -> str | None:
        """The base URL of Pi's built-in provider `provider.name` (its models' `baseUrl`)."""
        return PI_BASE_URLS.get(str(self.provider.name))

    def check_settings(self) -> None:
        """A real provider needs its name and a model: Pi's `--model` is `provider/model`."""
        if self.provider.kind == "real" and not (self.provider.name and self.model):
            raise ValueError("a real provider for pi needs provider.name and a model")

    def command(
        self,
        prompt: str,
        condition: Condition,
        run_dir: Path,
        skill_dirs: list[Path],
        extensions: tuple[Path, ...] = (),
    ) -> list[str]:
        """The `pi` command line for one run (the prompt last)."""
        if prompt.startswith("-"):
            # Pi would parse it as an option, and it refuses a bare `--` separator.
            raise ValueError("a prompt for pi must not start with '-'")
        provider = MOCK_PROVIDER if self.provider.kind == "mock" else str(self.provider.name)
        command = [
            str(self.cli()),
            "-p",
            "--mode",
            "json",
            "--no-extensions",
            "--no-skills",
            "--no-prompt-templates",
            "--no-themes",
            "--session-dir",
            str(run_dir / "session"),
            "--model",
            f"{provider}/{self._model_id()}",
        ]
        thinking = self.thinking_level(condition)
        if thinking:
            command += ["--thinking", thinking]
        for skill in skill_dirs:
            command += ["--skill", str(skill)]
        if condition.tools is not None:
            command += ["--tools", ",".join(condition.tools)] if condition.tools else ["--no-tools"]
        if condition.append_system_prompt is not None:
            # A path: Pi reads the file, and the text stays out of the command line and the record.
            command += ["--append-system-prompt", str(run_dir / "agent" / APPENDED_PROMPT)]
        for extension in extensions:
            command += ["--extension", str(extension)]
        return [*command, *condition.harness_args, prompt]

    def run(self, workdir: Path, prompt: str, condition: Condition, run_dir: Path, timeout: int) -> AgentRun:
        """Run Pi in `workdir`; streams, session and Pi's config go to `run_dir`."""
        run_dir.mkdir(parents=True, exist_ok=True)
        home, agent_dir = run_dir / "home", run_dir / "agent"
        home.mkdir(exist_ok=True)
        agent_dir.mkdir(exist_ok=True)
        check_condition(self.name, self.factors, condition)
        skill_dirs = [install_skill(skill, run_dir / "skills") for skill in condition.skills]
        if condition.append_system_prompt is not None:
            (agent_dir / APPENDED_PROMPT).write_text(condition.append_system_prompt, encoding="utf-8")
        extensions = [install_extension(e, agent_dir / "extensions") for e in condition.extensions]
        command = self.command(prompt, condition, run_dir, skill_dirs, tuple(extensions))
        self.condition_mapping = (
            "; ".join(mapping(self.factors, condition, [e.name for e in extensions])) or None
        )
        timeout_ms = int(condition.harness_options.get("provider_timeout_ms", DEFAULT_PROVIDER_TIMEOUT_MS))
        config = merge(settings(timeout_ms), condition.harness_settings)
        (agent_dir / "settings.json").write_text(json.dumps(config, indent=2) + "\n")
        env = self.environment(
            home, {"PI_CODING_AGENT_DIR": str(agent_dir), "PI_OFFLINE": "1", "PI_TELEMETRY": "0"}
        )

        def connect(base_url: str | None) -> dict[str, str]:
            self._write_models(agent_dir, base_url)
            return env

        run = self.run_process(command, workdir, condition, run_dir, timeout, None, connect)
        return run.model_copy(update={"session_path": save_session(run_dir)})

    def parse_session(self, run: AgentRun) -> Metrics:
        """Metrics from the saved session and event stream alone."""
        return fill_per_model(parse_files(run.session_path, run.stdout_path))

    @staticmethod
    def transcript(run: AgentRun) -> Transcript:
        """The conversation of the saved session (else the event stream), with the prompt."""
        return read_transcript(run.session_path, run.stdout_path)

    def infra_signature(self, run: AgentRun, metrics: Metrics) -> str | None:
        """The provider failure this run shows, if any (Pi exits 0 on all of them).

        `pi_provider_error`: the last assistant message stopped with "error", or the event
        stream's last `auto_retry_end` says retrying failed. `pi_truncated_stream`: a response
        ended without usage, i.e. the stream was cut before its end; Pi accepts such a response
        as complete (and runs its possibly partial tool call), so the run's tokens and behaviour
        cannot be trusted.
        """
        stream = read_jsonl(run.stdout_path)
        if metrics.stop_reasons and metrics.stop_reasons[-1] == "error":
            return INFRA_SIGNATURE
        retry_ends = [e for e in stream if e.get("type") == "auto_retry_end"]
        if retry_ends and retry_ends[-1].get("success") is False:
            return INFRA_SIGNATURE
        if any(truncated(m) for m in _messages(read_jsonl(run.session_path), stream)):
            return TRUNCATED_SIGNATURE
        return None

    def tool_pending(self, run: AgentRun) -> bool:
        """Whether the last assistant message's tool calls had not all got a toolResult message.

        Pi appends the assistant message that calls tools before it runs them, and each tool's
        result when it returns, to the session file and the event stream alike.
        """
        tools = ToolLog()
        for message in _messages(read_jsonl(run.session_path), read_jsonl(run.stdout_path)):
            fold_pi_message(Metrics(), message, tools)
        return tools.pending

    def _model_id(self) -> str:
        if self.provider.kind == "mock":
            return self.model or MOCK_MODEL
        return str(self.model)

    def _write_models(self, agent_dir: Path, base_url: str | None) -> None:
        config = models_config(self.provider, self._model_id(), base_url)
        if config is not None:
            (agent_dir / "models.json").write_text(json.dumps(config, indent=2) + "\n")


def models_config(provider: Provider, model: str, base_url: str | None) -> dict[str, Any] | None:
    """Pi's models.json for `provider` (see the module docstring), or None for a built-in as is."""
    if provider.kind == "mock":
        return {
            "providers": {
                MOCK_PROVIDER: {
                    "baseUrl": base_url,
                    "api": "openai-completions",
                    "apiKey": MOCK_KEY_ENV,
                    "models": [
                        {
                            "id": model,
                            "reasoning": True,
                            "contextWindow": 128000,
                            "maxTokens": 16384,
                            "cost": MOCK_COST,
                        }
                    ],
                }
            }
        }
    if not base_url:
        return None
    entry: dict[str, Any] = {"baseUrl": base_url, "apiKey": provider.api_key_env}
    if str(provider.name) not in BUILTIN_PROVIDERS:
        entry |= {"api": "openai-completions", "models": [{"id": model}]}
    return {"providers": {str(provider.name): entry}}


# The base URL of Pi 0.73.1's built-in providers with one endpoint (pi-ai's models.generated.js, which
# a test compares): the rig forwards to it from the key gateway Pi is pointed at instead.
PI_BASE_URLS = {
    "anthropic": "https://api.anthropic.com",
    "cerebras": "https://api.cerebras.ai/v1",
    "deepseek": "https://api.deepseek.com",
    "fireworks": "https://api.fireworks.ai/inference",
    "google": "https://generativelanguage.googleapis.com/v1beta",
    "groq": "https://api.groq.com/openai/v1",
    "huggingface": "https://router.huggingface.co/v1",
    "mistral": "https://api.mistral.ai",
    "moonshotai": "https://api.moonshot.ai/v1",
    "openai": "https://api.openai.com/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "xai": "https://api.x.ai/v1",
}

# Pi 0.73.1's built-in providers (pi-ai getProviders(); a test compares): another name needs models.
BUILTIN_PROVIDERS = frozenset(
    {
        "amazon-bedrock",
        "anthropic",
        "azure-openai-responses",
        "cerebras",
        "cloudflare-ai-gateway",
        "cloudflare-workers-ai",
        "deepseek",
        "fireworks",
        "github-copilot",
        "google",
        "google-vertex",
        "groq",
        "huggingface",
        "kimi-coding",
        "minimax",
        "minimax-cn",
        "mistral",
        "moonshotai",
        "moonshotai-cn",
        "openai",
        "openai-codex",
        "opencode",
        "opencode-go",
        "openrouter",
        "vercel-ai-gateway",
        "xai",
        "xiaomi",
        "xiaomi-token-plan-ams",
        "xiaomi-token-plan-cn",
        "xiaomi-token-plan-sgp",
        "zai",
    }
)


def settings(timeout_ms: int) -> dict[str, Any]:
    """Pi's settings.json: no retries anywhere, a bounded wait for each provider request."""
    return {"retry": {"enabled": False, "provider": {"maxRetries": 0, "timeoutMs": timeout_ms}}}


def save_session(run_dir: Path) -> Path | None:
    """Copy Pi's session file from `run_dir/session/` to `run_dir/session.jsonl`; None if none exists."""
    files = sorted((run_dir / "session").glob("*.jsonl"))
    if not files:
        return None
    # One run writes one session; should there be more, the newest (names start with a timestamp).
    target = run_dir / SESSION_FILE
    shutil.copyfile(files[-1], target)
    return target


def _messages(session: list[dict[str, Any]], stream: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The conversation's messages: from the session file, else the event stream's message_end events.

    Pi writes the session file only once an assistant message exists; the stream always has them.
    """
    source = [e.get("message") for e in session if e.get("type") == "message"]
    if not source:
        source = [e.get("message") for e in stream if e.get("type") == "message_end"]
    return (m for m in source if isinstance(m, dict))


def legacy_usage(message: dict[str, Any]) -> bool:
    """An openai-completions response with usage recorded by a Pi before 0.60 (LEGACY_USAGE_GAP)."""
    return (
        message.get("role") == "assistant"
        and message.get("api") == "openai-completions"
        and "responseId" not in message
        and isinstance(message.get("usage"), dict)
        and as_int(message["usage"].get("totalTokens")) > 0
    )


def truncated(message: dict[str, Any]) -> bool:
    """An assistant response that ended without usage: its stream was cut before the usage chunk.

    Providers report usage at the end of every complete response (Pi asks for it), so zero
    tokens on a response Pi did not mark as failed means the end of the stream never arrived.
    """
    if message.get("role") != "assistant" or message.get("stopReason") in ("error", "aborted"):
        return False
    usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
    return as_int(usage.get("totalTokens")) == 0


def read_transcript(session_path: Path | None, stdout_path: Path | None) -> Transcript:
    """The steps of one Pi run; Pi keeps the prompt as the first user message."""
    session, stream = read_jsonl(session_path), read_jsonl(stdout_path)
    header = next((e for e in session + stream if e.get("type") == "session"), {})
    transcript = pi_transcript("pi", _messages(session, stream), header)
    transcript.gaps += unreadable_lines(session_path) + unreadable_lines(stdout_path)
    if not session and not stream:
        transcript.gaps.append("neither the session nor the event stream was saved")
    return transcript


def fold_compactions(metrics: Metrics, session: list[dict[str, Any]], stream: list[dict[str, Any]]) -> None:
    """The run's compactions: the session's `compaction` entries (else the stream's completed
    `compaction_end` events), each with the tokensBefore Pi estimated; Pi records no context size
    after one. Pi keeps nothing of its summarization requests but the summary (0.73.1's `compact()`
    drops the response's usage), so their tokens and cost are missing from the totals.

    In `pi -p` Pi checks the threshold when the agent loop ends and compacts after the final
    answer, once the event stream is closed: the stream then has the `compaction_start` and only the
    session the result. A start without a recorded compaction (it failed, or the run was killed
    first) still sent a summarization request. Without either file, nothing is known.
    """
    if not session and not stream:
        return
    entries = [e for e in session if e.get("type") == "compaction"]
    if not entries:
        ends = [e.get("result") for e in stream if e.get("type") == "compaction_end"]
        entries = [r for r in ends if isinstance(r, dict)]
    record_compactions(metrics, [(optional_int(e.get("tokensBefore")), None) for e in entries])
    if entries:
        metrics.incomplete(
            f"{len(entries)} compaction(s): Pi records no usage for its summarization requests, "
            "so tokens and cost leave them out"
        )
    unfinished = sum(e.get("type") == "compaction_start" for e in stream) - len(entries)
    if unfinished > 0:
        metrics.incomplete(f"{unfinished} compaction(s) started and never recorded: their usage is unknown")


def parse_files(session_path: Path | None, stdout_path: Path | None) -> Metrics:
    """Metrics of one Pi run from its session file and its `--mode json` event stream."""
    session, stream = read_jsonl(session_path), read_jsonl(stdout_path)
    metrics = Metrics()
    header = next((e for e in session + stream if e.get("type") == "session"), {})
    cwd = header.get("cwd") if isinstance(header.get("cwd"), str) else None
    for entry in session:
        if entry.get("type") == "model_change":
            metrics.model = f"{entry.get('provider')}/{entry.get('modelId')}"
        elif entry.get("type") == "thinking_level_change":
            metrics.thinking_level = entry.get("thinkingLevel")
    costs: list[float] = []
    tools = ToolLog()
    for message in _messages(session, stream):
        cost = fold_pi_message(metrics, message, tools)
        if cost is not None:
            costs.append(cost)
        if (
            message.get("role") == "assistant"
            and metrics.model is None
            and message.get("provider")
            and message.get("model")
        ):
            metrics.model = f"{message['provider']}/{message['model']}"
        # A stream cut before its end is a response without usage, which Pi takes as complete:
        # a failed attempt besides those fold_pi_message counts (errored requests, transports
        # given up for another).
        metrics.transport_failures += truncated(message)
    for event in stream:
        if event.get("type") == "auto_retry_end" and event.get("success") is False:
            final = str(event.get("finalError", ""))
            if final and final not in metrics.error_messages:
                metrics.error_messages.append(final)
    if costs:
        metrics.cost_usd = round_cost(sum(costs))
        metrics.cost_source = COST_SOURCE
    version = header.get("version")
    if version is not None and version not in SESSION_VERSIONS:
        metrics.incomplete(f"session format version {version!r}, which this parser does not know")
    cut = sum(truncated(m) for m in _messages(session, stream))
    legacy = sum(legacy_usage(m) for m in _messages(session, stream))
    if legacy:
        metrics.incomplete(LEGACY_USAGE_GAP.format(n=legacy))
    unread = unread_usage(session, SESSION_ENTRIES) + unread_usage(stream, STREAM_EVENTS)
    usage_gaps(metrics, cut, unread)
    fold_compactions(metrics, session, stream)
    if metrics.output_tokens and not metrics.reasoning_tokens:
        metrics.unrecorded(NO_REASONING_GAP)
    derive_behaviour(metrics, tools.read_paths(), cwd, attempted=tools.read_attempts())
    return metrics

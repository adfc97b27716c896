"""The Gemini CLI adapter: `gemini --output-format stream-json` (@google/gemini-cli) with its own HOME.

Isolation: every run gets `run_dir/home` (HOME) holding only `.gemini/settings.json` written here
(and the condition's skills); the environment is built from nothing (`cli.base_env`) plus the key
(GEMINI_API_KEY, the one variable Gemini CLI reads it from), the provider's base URL
(GOOGLE_GEMINI_BASE_URL: the @google/genai client takes it as is, plain http included) and
GEMINI_CLI_NO_RELAUNCH (Gemini CLI otherwise starts a second node process of itself, only to give
it a larger heap). TMPDIR is `run_dir/tmp`: Gemini CLI writes a report of every API error there.

Command line: `--prompt=<prompt>` (headless; the `=` keeps a prompt starting with "-" a value),
`--model`, `--output-format stream-json`, `--approval-mode yolo` (tools run without asking) and
`--skip-trust` (headless Gemini CLI refuses an untrusted folder, and folder trust is also off).

`settings.json`: auth type `gemini-api-key` (no OAuth, no browser); the model (`model.name`,
default `gemini-2.5-pro` for the mock: a model named there never goes through Gemini CLI's model
router, whose classifier is a request of its own); loop detection off and the next-speaker check
skipped (each is a request besides the agent loop); at most one attempt per request
(`general.maxAttempts = 1`, `retryFetchErrors` off: Gemini CLI otherwise retries 429, 5xx and
failed connections up to 10 times with backoff, so a dead or erroring provider ends the run in
seconds and the rig quarantines and reruns it); no auto-update or update notification, no usage
statistics (Clearcut), no telemetry, no IDE integration, no sandbox (the rig's own confines the
agent), no ripgrep (Gemini CLI would download it) and no interactive pty shell (plain child
processes: output without terminal escapes). A server that accepts a request and never answers
still hangs Gemini CLI: the rig's silence watchdog (`stall_s`) ends the run, as stalled.

Provider: `kind = "mock"` serves the mock model (the Gemini wire protocol) for the run; `kind =
"real"` uses Google's endpoint, or `base_url` if given, with the key from `api_key_env`.

Conditions (recorded in `condition_mapping`):
- AGENTS.md: Gemini CLI reads GEMINI.md; `context.fileName` names AGENTS.md, which it then reads
  from the workspace (and its ancestors up to the git root: the rig guarantees none holds one) and
  from `$HOME/.gemini/` (the rig's holds none), and sends in the first user message. In 0.61.0 the
  setting adds to the names rather than replacing GEMINI.md, so a workspace GEMINI.md would be read
  too; the fixture holds none.
- skills: Gemini CLI 0.61.0 has Agent Skills; each skill directory is copied to
  `$HOME/.gemini/skills/<name>/`, which it lists in the system prompt next to its two built-in
  skills (present in every arm) and offers through the `activate_skill` tool.
- tools: `condition.tools` (Gemini CLI's tool names) becomes the allow-list `tools.core`;
  `activate_skill` is added when the condition has skills (without it they cannot be activated).
- thinking: a `modelConfigs.overrides` entry for the run's model sets its `thinkingConfig`: for a
  Gemini 2.x model a `thinkingBudget` (none 0, low 1024, medium 8192, high 24576: the budgets the
  Gemini API's OpenAI-compatible `reasoning_effort` uses), for later models `thinkingLevel`
  (minimal, low, medium, high); a whole number is a `thinkingBudget` for any model.
- harness_settings: merged into settings.json under the rig's own (see `SETTINGS_KEYS`): where
  both set a key, the rig's value stays (the model's name, the sandbox off, ripgrep off, ...).
- harness_args: `--extensions` (which of the installed extensions are active, `none` for none) and
  `--allowed-mcp-server-names`, after the rig's options.
- extensions: each is a `gemini-extension.json` manifest (any file name; JSON with `name` and
  `version`), copied to `$HOME/.gemini/extensions/<name>/gemini-extension.json`, which Gemini CLI
  loads at start (enabled, as no extension-enablement.json disables it): its `excludeTools`,
  `mcpServers` and the like take effect; a manifest's files beside it (hooks/, skills/, a context
  file) do not come along, since an extension is one file.
- append_system_prompt: none. Context files (also `$HOME/.gemini/`'s) go into the first user
  message, and `GEMINI_SYSTEM_MD` replaces the whole prompt. Its default prompt plus the text is no
  faithful stand-in: `GEMINI_WRITE_SYSTEM_MD` writes the default only while a run builds a model
  request (no run without a model has it), as the final prompt of that run (its tools, skills, git
  state and memory already rendered in), and a GEMINI_SYSTEM_MD is rendered again on every request
  (skills substituted, memory appended), so the memory would be there twice.

Logs: stdout.log is the stream-json event stream. Gemini CLI writes its session to
`$HOME/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl`; after the run it is copied to
`run_dir/session.jsonl`, which `parse_session` reads with stdout.log (see `parse_files`).

Cost: Gemini CLI reports none. A mock run is priced by `MOCK_COST` (USD per million tokens); a real
run with `genai-prices` per model response, as provider `google`. Tokens and cost per model
(`per_model`: Gemini CLI may route requests to another model) are the sums of each model's
responses, the model each session message names.
"""

import json
import re
import shutil
from pathlib import Path
from typing import Any

import genai_prices

from harnesses.cli_harness import CliHarness, install_skill, round_cost
from harnesses.factors import Factors, check_condition, extension_path, merge
from harnesses.factors import mapping as factor_mapping
from harnesses.logs import (
    ToolLog,
    as_int,
    as_str,
    as_time,
    derive_behaviour,
    fill_per_model,
    iso_timestamp,
    optional_int,
    place_by_time,
    read_jsonl,
    unread_usage,
    unreadable_lines,
    usage_gaps,
)
from harnesses.mock_model.gemini import EFFORT_BUDGETS, Gemini
from harnesses.mock_model.tools import ToolCall, ToolMap
from rig.confine.run_budget import LiveUsage
from rig.confine.session_usage import SessionUsage
from rig.schema import (
    AgentRun,
    Condition,
    Metrics,
    ModelUsage,
    Transcript,
    TranscriptStep,
    TranscriptToolCall,
)

BIN_ENV = "RIG_GEMINI_BIN"
KEY_ENV = "GEMINI_API_KEY"
BASE_URL_ENV = "GOOGLE_GEMINI_BASE_URL"
GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"
SESSION_FILE = "session.jsonl"
HOME_DIR = "home"
MOCK_MODEL = "gemini-2.5-pro"
# USD per million tokens, for a mock run (Gemini 2.5 Pro's list prices up to 200k tokens).
MOCK_COST = {"input": 1.25, "output": 10.0, "cache_read": 0.125}
# Session messages and stream events whose usage the parser reads (`gemini` tokens, `result`
# stats): usage in any other kind of entry is a gap in the metrics.
READ_MESSAGES = frozenset({"gemini"})
# A run without a session (Gemini CLI 0.18 writes none the adapter reads; a run killed early) has
# only the stream's run totals: no responses, no thoughts (outside its output), and on 0.18 no
# cached tokens apart (inside its input).
STREAM_ONLY_GAP = "no session: responses and thoughts tokens are not in the stream's totals"
NO_CACHED_GAP = "the stream's totals do not split cached tokens from input"
# Gemini's API has no cache-write count: a provider's cache writes arrive as uncached input.
NO_CACHE_WRITE_GAP = "Gemini CLI records no cache writes: cache_write_tokens is 0, any are inside input"
UNNAMED_MODEL_GAP = "model responses without a model name: per_model leaves their tokens out"
READ_EVENTS = frozenset({"init", "message", "tool_use", "tool_result", "result", "error"})
# Session records besides the header and `$set` updates: a session with none is of an unknown format.
SESSION_TYPES = frozenset({"user", "gemini"})
MOCK_COST_SOURCE = "rig mock price table (harnesses.gemini.adapter.MOCK_COST)"
COST_SOURCE = f"genai-prices {genai_prices.__version__}"
PRICE_PROVIDER = "google"
SKILL_TOOL = "activate_skill"
API_ERROR_SIGNATURE = "gemini_api_error"
TRUNCATED_SIGNATURE = "gemini_truncated_stream"
# Failures a run ends on that are the agent's own doing (its turn limit, a fatal tool error it
# caused), not the provider's: scored like any other run. Gemini CLI names them by error class.
AGENT_FAILURES = frozenset(
    {
        "FatalTurnLimitedError",
        "FatalToolExecutionError",
        "FatalCancellationError",
        "no_space_left",
        "FatalInputError",
    }
)
THINKING_LEVELS = ("minimal", "low", "medium", "high")
# Gemini CLI 0.61.0's built-in tools: the `*_TOOL_NAME` constants of its bundle, and the two
# background-process tools a default request declares.
TOOLS = frozenset(
    {
        "activate_skill",
        "ask_user",
        "complete_task",
        "enter_plan_mode",
        "exit_plan_mode",
        "get_internal_docs",
        "glob",
        "google_web_search",
        "grep_search",
        "invoke_agent",
        "list_background_processes",
        "list_directory",
        "list_mcp_resources",
        "read_background_output",
        "read_file",
        "read_many_files",
        "read_mcp_resource",
        "replace",
        "run_shell_command",
        "take_snapshot",
        "tracker_add_dependency",
        "tracker_create_task",
        "tracker_get_task",
        "tracker_list_tasks",
        "tracker_update_task",
        "tracker_visualize",
        "update_topic",
        "web_fetch",
        "write_file",
        "write_todos",
    }
)
# harness_settings: the top-level keys of settings.json that change the agent, not where it logs,
# which model or endpoint it reaches, its auth, sandbox, telemetry or trust (`general`, `output`,
# `privacy`, `telemetry`, `security`, `advanced`, `admin` stay the rig's; `modelConfigs` can alias
# the model to another; `context` can add directories beyond the workspace; `mcpServers`, `mcp` and
# `experimental` can reach other hosts). The rig's own values are merged over the condition's.
SETTINGS_KEYS = frozenset(
    {"model", "tools", "contextManagement", "useWriteTodos", "skills", "hooks", "hooksConfig"}
)
# harness_args: 0.61.0's options that change neither logs, model, endpoint, approval nor the sandbox.
ARGS = {"--extensions": 1, "--allowed-mcp-server-names": 1}
EXTENSIONS_DIR = "extensions"
EXTENSION_MANIFEST = "gemini-extension.json"
_READ_TOOLS = frozenset({"read_file"})
_SHELL_TOOL = "run_shell_command"
_GEMINI_2 = re.compile(r"^gemini-2(\.|-)")

# The mock model's steps as Gemini CLI's tools (it resolves a relative path in its workspace).
MOCK_TOOLS = ToolMap(
    shell=lambda command, cwd: ToolCall(_SHELL_TOOL, {"command": command}),
    read=lambda path, cwd: ToolCall("read_file", {"file_path": path}),
    write=lambda path, content, cwd: ToolCall("write_file", {"file_path": path, "content": content}),
)


def final_answer(event: dict[str, Any]) -> bool:
    """Whether a stream-json event ends Gemini CLI's run: its `result`."""
    return event.get("type") == "result"


class GeminiHarness(CliHarness):
    """A HarnessAdapter for Gemini CLI (`gemini`), version-pinned in harnesses/node.

    `condition_mapping` says how AGENTS.md, skills, tools, thinking and the factors were realised.
    """

    name = "gemini"
    package = "@google/gemini-cli"
    binary = "gemini"
    bin_env = BIN_ENV
    mock_protocol = Gemini(MOCK_TOOLS)
    mock_key_env = KEY_ENV
    final_event = staticmethod(final_answer)
    # stream-json reports usage only in its final `result`: the session below .gemini/tmp, as it grows.
    session_usage = SessionUsage(layout=("*", "chats", "session-*.jsonl"), reader=lambda: record_usage)
    factors = Factors(
        settings_file="$HOME/.gemini/settings.json",
        settings_keys=SETTINGS_KEYS,
        args=ARGS,
        extensions=f"as {EXTENSION_MANIFEST} manifests in $HOME/.gemini/{EXTENSIONS_DIR}/<name>/",
        thinking="settings.json modelConfigs.overrides thinkingConfig (thinkingBudget or thinkingLevel)",
    )
    usage_fields = frozenset({"input", "output", "cache_read", "reasoning"})
    # Gemini's API has no cache-write count: the mock's cache writes arrive as uncached input.
    usage_folds = {"cache_write": "input"}
    # Its SessionEnd hooks run in the exit cleanup, after runNonInteractive wrote the `result` event
    # (an AfterAgent hook runs before it: a stall); a hook's timeout is in milliseconds.
    silent_after_final = {
        "harness_settings": {
            "hooks": {
                "SessionEnd": [{"hooks": [{"type": "command", "command": "sleep 600", "timeout": 600000}]}]
            }
        }
    }
    lacks = {
        "append_system_prompt": "Gemini CLI can only replace its whole system prompt (GEMINI_SYSTEM_MD), "
        "not append to it, and writes its default prompt (GEMINI_WRITE_SYSTEM_MD) only once a run "
        "builds its first request, already rendered with that run's memory",
        "cache_write": "the Gemini API has no cache-write count",
        **dict.fromkeys(
            ("compactions", "compaction_tokens_before", "compaction_tokens_after", "compaction_tokens"),
            "Gemini CLI 0.61.0 records a chat compression in neither its stream-json nor its session "
            "(it only replaces the session's messages), and a headless run never compresses: the split "
            "must fall on a user message that is no tool response, and the prompt is the only one",
        ),
    }

    def default_base_url(self) -> str:
        """Google's Gemini API, which Gemini CLI calls without GOOGLE_GEMINI_BASE_URL."""
        return GEMINI_BASE_URL

    def check_settings(self) -> None:
        """A real provider needs a model and a key variable; a thinking level must map onto the model."""
        if self.provider.kind == "real" and not (self.model and self.provider.api_key_env):
            raise ValueError("a real provider for gemini needs a model and provider.api_key_env")
        if self.thinking is not None:
            thinking_config(self._model(), self.thinking)

    def key_env(self) -> str:
        """GEMINI_API_KEY, for every provider: the one variable Gemini CLI reads the key from."""
        return KEY_ENV

    def command(self, prompt: str) -> list[str]:
        """The `gemini` command line for one run (the prompt first, as `--prompt=...`)."""
        return [
            str(self.cli()),
            f"--prompt={prompt}",
            "--model",
            self._model(),
            "--output-format",
            "stream-json",
            "--approval-mode",
            "yolo",
            "--skip-trust",
        ]

    def settings(self, condition: Condition) -> dict[str, Any]:
        """The content of `$HOME/.gemini/settings.json` for one run (see the module docstring)."""
        settings: dict[str, Any] = {
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "model": {"name": self._model(), "disableLoopDetection": True, "skipNextSpeakerCheck": True},
            "general": {
                "enableAutoUpdate": False,
                "enableAutoUpdateNotification": False,
                "maxAttempts": 1,
                "retryFetchErrors": False,
            },
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "ide": {"enabled": False},
            "tools": {
                "sandbox": False,
                "useRipgrep": False,
                "shell": {"enableInteractiveShell": False},
            },
            "context": {"fileName": "AGENTS.md"},
        }
        tools = core_tools(condition.tools, bool(condition.skills))
        if tools is not None:
            settings["tools"]["core"] = tools
        thinking = self.thinking_level(condition)
        if thinking is not None:
            config = {"generateContentConfig": {"thinkingConfig": thinking_config(self._model(), thinking)}}
            override = {"match": {"model": self._model()}, "modelConfig": config}
            settings["modelConfigs"] = {"overrides": [override]}
        return settings

    def run(self, workdir: Path, prompt: str, condition: Condition, run_dir: Path, timeout: int) -> AgentRun:
        """Run Gemini CLI in `workdir`; streams, session copy and HOME go to `run_dir`."""
        check_condition(self.name, self.factors, condition)
        settings = self.settings(condition)  # refuses a tool list or thinking level before starting
        run_dir.mkdir(parents=True, exist_ok=True)
        home, tmp = run_dir / HOME_DIR, run_dir / "tmp"
        for folder in (home, tmp):
            # A session left by an earlier run in the same folder must not be taken for this one's.
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
        gemini_dir = home / ".gemini"
        gemini_dir.mkdir()
        skills = [install_skill(skill, gemini_dir / "skills") for skill in condition.skills]
        extensions = [install_manifest(e, gemini_dir / EXTENSIONS_DIR) for e in condition.extensions]
        # The condition's settings first and the rig's over them: where both set a key the rig's
        # value stays, so no condition moves the model, turns the sandbox on or downloads ripgrep.
        written = merge(condition.harness_settings, settings)
        (gemini_dir / "settings.json").write_text(json.dumps(written, indent=2) + "\n")
        parts = [
            mapping(settings, [s.name for s in skills]),
            *factor_mapping(self.factors, condition, extensions),
        ]
        self.condition_mapping = "; ".join(parts)
        extra = {"GEMINI_CLI_NO_RELAUNCH": "true", "TMPDIR": str(tmp)}

        def connect(base_url: str | None) -> dict[str, str]:
            return self.environment(home, {**extra, BASE_URL_ENV: base_url} if base_url else extra)

        # Gemini CLI writes its session to .gemini/tmp/<project>/chats/: watched, and read by a run budget.
        sessions = gemini_dir / "tmp"
        sessions.mkdir()
        command = [*self.command(prompt), *condition.harness_args]
        run = self.run_process(command, workdir, condition, run_dir, timeout, sessions, connect)
        return run.model_copy(update={"session_path": save_session(home, run_dir, run.stdout_path)})

    def parse_session(self, run: AgentRun) -> Metrics:
        """Metrics from the saved session copy, the event stream and the run's settings alone."""
        metrics = parse_files(run.session_path, run.stdout_path)
        settings = run.stdout_path.parent / HOME_DIR / ".gemini" / "settings.json"
        metrics.thinking_level = _thinking_setting(settings)
        if metrics.assistant_messages:
            metrics.cost_usd, costs, metrics.cost_source = price(
                read_session(run.session_path), self.provider.kind == "mock"
            )
            for model, part in metrics.per_model.items():
                part.cost_usd = costs.get(model)
        return fill_per_model(metrics)

    @staticmethod
    def transcript(run: AgentRun) -> Transcript:
        """The conversation of the saved session (else the event stream), see `read_transcript`."""
        return read_transcript(run.session_path, run.stdout_path)

    def infra_signature(self, run: AgentRun, metrics: Metrics) -> str | None:
        """The provider failure this run shows, if any.

        `gemini_api_error`: the stream's `result` says the run failed, for a reason other than the
        agent's own (an API error, a failed connection). `gemini_truncated_stream`: a model response
        was recorded without usage, i.e. its stream was cut before the last chunk; Gemini CLI accepts
        such a response (and runs its tool call), so the run's tokens cannot be trusted.
        """
        result = _result(read_jsonl(run.stdout_path))
        if result is not None and result.get("status") == "error":
            error = result.get("error") if isinstance(result.get("error"), dict) else {}
            if error.get("type") not in AGENT_FAILURES:
                return API_ERROR_SIGNATURE
        if any(m.get("tokens") is None for m in _model_messages(read_session(run.session_path))):
            return TRUNCATED_SIGNATURE
        return None

    def tool_pending(self, run: AgentRun) -> bool:
        """Whether the run ended while a tool call ran, rather than while a response streamed.

        Gemini CLI emits a `tool_use` event as soon as a function call arrives in the stream, but
        runs the call only once the response has ended; then it records the response in the session
        (a `gemini` message, without `toolCalls`) and, when every call has returned, emits each
        `tool_result` and records the message again with its `toolCalls`. So a call is running when
        its `tool_use` has no `tool_result` and the session's last model message, recorded after
        that `tool_use`, still has no `toolCalls`; a call whose response never ended is not.
        """
        stream = read_jsonl(run.stdout_path)
        done = {e.get("tool_id") for e in stream if e.get("type") == "tool_result"}
        open_calls = [e for e in stream if e.get("type") == "tool_use" and e.get("tool_id") not in done]
        responses = _model_messages(read_session(run.session_path))
        if not open_calls or not responses or responses[-1].get("toolCalls"):
            return False
        recorded, called = (
            as_time(responses[-1].get("timestamp")),
            as_time(open_calls[0].get("timestamp")),
        )
        return recorded is not None and called is not None and recorded >= called

    def _model(self) -> str:
        return self.model or MOCK_MODEL


def core_tools(tools: list[str] | None, skills: bool) -> list[str] | None:
    """The `tools.core` allow-list for `tools` (None: Gemini CLI's default set); unknown names refused."""
    if tools is None:
        return None
    unknown = sorted(set(tools) - TOOLS)
    if unknown:
        raise ValueError(f"gemini has no tools {unknown}; its tools are {sorted(TOOLS)}")
    if skills and SKILL_TOOL not in tools:
        return [*tools, SKILL_TOOL]
    return list(tools)


def install_manifest(extension: str, root: Path) -> str:
    """Install an extension manifest (a `gemini-extension.json`, under any file name) as the
    extension `root/<its name>/`; its name. ValueError for a file that is no such manifest."""
    source = extension_path(extension)
    try:
        manifest = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"extension {extension!r} is no {EXTENSION_MANIFEST} ({exc})") from exc
    name = manifest.get("name") if isinstance(manifest, dict) else None
    # Gemini CLI refuses a manifest without both, or with any other name (which also keeps the
    # directory inside `root`).
    if not (isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9-]+", name) and manifest.get("version")):
        raise ValueError(
            f"extension {extension!r}: a {EXTENSION_MANIFEST} needs a `name` (letters, digits, '-') "
            "and a `version`"
        )
    target = root / name
    if target.exists():
        raise ValueError(f"extension {extension!r}: another extension of the condition is named {name!r}")
    target.mkdir(parents=True)
    shutil.copyfile(source, target / EXTENSION_MANIFEST)
    return name


def thinking_config(model: str, thinking: str) -> dict[str, Any]:
    """The `thinkingConfig` a thinking level becomes for `model` (see the module docstring)."""
    if thinking.isdigit():
        return {"thinkingBudget": int(thinking)}
    if _GEMINI_2.match(model):
        if thinking not in EFFORT_BUDGETS:
            raise ValueError(
                f"thinking {thinking!r} has no budget for {model}; use one of {tuple(EFFORT_BUDGETS)} "
                "or a number of tokens"
            )
        return {"thinkingBudget": EFFORT_BUDGETS[thinking]}
    if thinking not in THINKING_LEVELS:
        raise ValueError(
            f"thinking {thinking!r} is no thinking level of {model}; use one of {THINKING_LEVELS} "
            "or a number of tokens"
        )
    return {"thinkingLevel": thinking.upper()}


def mapping(settings: dict[str, Any], skills: list[str]) -> str:
    """What the record says about how the condition was realised."""
    parts = ["AGENTS.md via context.fileName"]
    if skills:
        parts.append("skills copied to $HOME/.gemini/skills/: " + ", ".join(skills))
    core = settings["tools"].get("core")
    if core is not None:
        parts.append("tools.core: " + (", ".join(core) or "none"))
    overrides = settings.get("modelConfigs", {}).get("overrides", [])
    if overrides:
        thinking = overrides[0]["modelConfig"]["generateContentConfig"]["thinkingConfig"]
        parts.append(f"thinkingConfig {json.dumps(thinking)} for {overrides[0]['match']['model']}")
    return "; ".join(parts)


def save_session(home: Path, run_dir: Path, stdout_path: Path) -> Path | None:
    """Copy the run's session to `run_dir/session.jsonl`; None if Gemini CLI wrote none.

    The session whose id the stream's `init` event names wins; without one, the newest.
    """
    sessions = sorted((home / ".gemini" / "tmp").glob("*/chats/session-*.jsonl"), key=lambda p: p.name)
    if not sessions:
        return None
    init = next((e for e in read_jsonl(stdout_path) if e.get("type") == "init"), {})
    session_id = init.get("session_id")
    # The file name carries only the id's first 8 characters; the first record has the whole id.
    chosen = next((p for p in sessions if session_id and _session_id(p) == session_id), sessions[-1])
    target = run_dir / SESSION_FILE
    shutil.copyfile(chosen, target)
    return target


def _session_id(path: Path) -> str | None:
    first = next(iter(read_jsonl(path)), {})
    return first.get("sessionId") if isinstance(first.get("sessionId"), str) else None


def read_session(path: Path | None) -> list[dict[str, Any]]:
    """The messages of a session file, each in its last recorded state, in the order first written.

    Gemini CLI appends a record per message and appends it again, under the same `id`, whenever it
    changes (a model message gets its `toolCalls` once they ran); a `$set` record replaces the
    metadata, and one holding `messages` replaces the whole list (the session's opening context).
    """
    messages: dict[str, dict[str, Any]] = {}
    for record in read_jsonl(path):
        update = record.get("$set")
        if isinstance(update, dict):
            if isinstance(update.get("messages"), list):
                messages = {
                    str(m.get("id")): m for m in update["messages"] if isinstance(m, dict) and m.get("id")
                }
            continue
        if isinstance(record.get("id"), str) and isinstance(record.get("type"), str):
            messages[record["id"]] = record
    return list(messages.values())


def record_usage(record: dict[str, Any]) -> list[LiveUsage]:
    """The usage of the model responses one session record holds, as the session grows: the reader
    of GeminiHarness.session_usage (rig.confine.session_usage).

    A `gemini` message with tokens is one response, keyed by its id (Gemini CLI records a message
    again as it changes); a `$set` of the message list holds its messages. Each is counted by
    `_fold_message`, as parse_files counts it.
    """
    update = record.get("$set")
    listed = update.get("messages") if isinstance(update, dict) else [record]
    messages = [m for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []
    usages = []
    for message in _model_messages(messages):
        if not isinstance(message.get("id"), str) or not isinstance(message.get("tokens"), dict):
            continue
        counted = Metrics()
        _fold_message(counted, message, ToolLog())
        tokens = ModelUsage(**{field: getattr(counted, field) for field in _TOKEN_FIELDS})
        usages.append(LiveUsage(tokens, message["id"], as_str(message.get("model"))))
    return usages


_TOKEN_FIELDS = tuple(field for field in ModelUsage.model_fields if field != "cost_usd")


def _model_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m.get("type") == "gemini"]


def parse_files(session_path: Path | None, stdout_path: Path | None) -> Metrics:
    """Metrics of one Gemini CLI run from its session copy and its stream-json event stream.

    From the session: one model response per `gemini` message, its tokens (`input` is Gemini's
    prompt count, cached tokens included; `output` excludes the `thoughts`, which the rig counts
    inside output), its model (whose `per_model` entry the tokens join), its tool calls
    (`toolCalls`, each with its arguments, result and `status`: `error` is a tool that failed, not
    a command that exited non-zero) and the answer. A message without tokens is a response whose
    stream was cut (a transport failure). From the stream: the run's outcome (`result`: `completed`
    or `error` as the stop reason, the error's message) and the `error` events (invalid streams,
    warnings), each a failed model attempt when its severity is `error`. Without a session, the
    stream's tool calls and `result` stats stand in, with their table per model (`models`) for
    `per_model`. Gemini records no cache writes: a gap says so.
    """
    messages, stream = read_session(session_path), read_jsonl(stdout_path)
    metrics = Metrics()
    tools = ToolLog()
    cwd = _workspace(messages)
    for message in _model_messages(messages):
        _fold_message(metrics, message, tools)
    if not messages:
        _fold_stream(metrics, stream, tools)
    for event in stream:
        if event.get("type") == "error" and event.get("severity") == "error":
            metrics.error_messages.append(str(event.get("message", "")))
            metrics.transport_failures += 1
    result = _result(stream)
    if result is not None:
        metrics.stop_reasons.append("completed" if result.get("status") == "success" else "error")
        error = result.get("error") if isinstance(result.get("error"), dict) else None
        if error:
            metrics.error_messages.append(str(error.get("message", "")))
            if error.get("type") not in AGENT_FAILURES:
                metrics.transport_failures += 1
    if metrics.assistant_messages or metrics.total_tokens:
        metrics.unrecorded(NO_CACHE_WRITE_GAP)
    cut = sum(not isinstance(m.get("tokens"), dict) for m in _model_messages(messages))
    usage_gaps(metrics, cut, unread_usage(messages, READ_MESSAGES) + unread_usage(stream, READ_EVENTS))
    records = read_jsonl(session_path)
    if records and not any(
        "sessionId" in r or "$set" in r or r.get("type") in SESSION_TYPES for r in records
    ):
        metrics.incomplete("session of a format this parser does not know (no header, user or gemini record)")
    if stream and not any(e.get("type") in READ_EVENTS for e in stream):
        metrics.incomplete("event stream of a format this parser does not know (no event of a type it reads)")
    derive_behaviour(
        metrics,
        tools.read_paths(),
        cwd,
        skill_invoked=SKILL_TOOL in metrics.tool_calls_by_name,
        attempted=tools.read_attempts(),
    )
    return metrics


def read_transcript(session_path: Path | None, stdout_path: Path | None) -> Transcript:
    """The steps of one Gemini CLI run.

    The prompt is the stream's user message (else the session's last text-only user message before
    the first response: the ones before it are Gemini CLI's opening context). Each `gemini` message
    is an agent step with its tokens (as parse_files counts them), thoughts and tool calls with
    their results; the stream's `error` events and an erroring `result` are system steps, placed by
    time. Without a session, the stream's tool calls and messages stand in, without tokens. The
    cost depends on the provider (priced by the adapter), so the steps have none.
    """
    messages, stream = read_session(session_path), read_jsonl(stdout_path)
    init = next((e for e in stream if e.get("type") == "init"), {})
    transcript = Transcript(
        harness="gemini",
        session_id=as_str(init.get("session_id")),
        model=as_str(init.get("model")),
        gaps=unreadable_lines(session_path) + unreadable_lines(stdout_path),
    )
    prompt = next((e for e in stream if e.get("type") == "message" and e.get("role") == "user"), {}).get(
        "content"
    ) or _session_prompt(messages)
    if isinstance(prompt, str) and prompt:
        transcript.steps.append(TranscriptStep(source="user", text=prompt))
    steps = [_turn(m) for m in _model_messages(messages)] if messages else _stream_turns(stream)
    notes = []
    for event in stream:
        error = event.get("error") if isinstance(event.get("error"), dict) else {}
        if event.get("type") == "error":
            text = f"[{event.get('severity', 'error')}] {event.get('message', '')}"
        elif event.get("type") == "result" and error:
            text = f"[error] {error.get('message', '')}"
        else:
            continue
        notes.append(
            TranscriptStep(source="system", text=text, timestamp=iso_timestamp(event.get("timestamp")))
        )
    transcript.steps += place_by_time(steps, notes)
    transcript.model = transcript.model or next((s.model for s in steps if s.model), None)
    if not messages and not stream:
        transcript.gaps.append("neither the session nor the event stream was saved")
    return transcript


def _session_prompt(messages: list[dict[str, Any]]) -> str | None:
    prompt = None
    for message in messages:
        if message.get("type") == "gemini":
            break
        parts = message.get("content") if isinstance(message.get("content"), list) else []
        texts = [p.get("text") for p in parts if isinstance(p, dict)]
        if message.get("type") == "user" and texts and all(isinstance(t, str) for t in texts):
            prompt = "".join(texts)
    return prompt


def _turn(message: dict[str, Any]) -> TranscriptStep:
    """One `gemini` message as an agent step (tokens in the rig's terms, as `_fold_message`)."""
    thoughts = [t for t in message.get("thoughts") or [] if isinstance(t, dict)]
    calls = [c for c in message.get("toolCalls") or [] if isinstance(c, dict)]
    step = TranscriptStep(
        source="agent",
        text=message["content"] if isinstance(message.get("content"), str) else "",
        reasoning="\n".join(f"{t.get('subject', '')}: {t.get('description', '')}" for t in thoughts) or None,
        model=as_str(message.get("model")),
        tool_calls=[
            TranscriptToolCall(
                id=as_str(call.get("id")),
                name=str(call.get("name")),
                arguments=call.get("args") if isinstance(call.get("args"), dict) else {},
                output=_call_output(call) if call.get("result") is not None else None,
                is_error=call.get("status") == "error" if call.get("status") else None,
            )
            for call in calls
        ],
        timestamp=iso_timestamp(message.get("timestamp")),
    )
    tokens = message.get("tokens")
    if isinstance(tokens, dict):
        cached, thinking = as_int(tokens.get("cached")), optional_int(tokens.get("thoughts"))
        step.input_tokens = as_int(tokens.get("input")) - cached
        step.cache_read_tokens = cached
        step.output_tokens = as_int(tokens.get("output")) + (thinking or 0)
        step.reasoning_tokens = thinking
    return step


def _stream_turns(stream: list[dict[str, Any]]) -> list[TranscriptStep]:
    """Agent steps from the event stream alone: assistant text, then the tool calls that follow it."""
    steps: list[TranscriptStep] = []
    calls: dict[str, TranscriptToolCall] = {}
    for event in stream:
        kind = event.get("type")
        if kind == "message" and event.get("role") == "assistant":
            if not steps or steps[-1].tool_calls:
                steps.append(TranscriptStep(source="agent", timestamp=iso_timestamp(event.get("timestamp"))))
            steps[-1].text += str(event.get("content", ""))
        elif kind == "tool_use":
            if not steps:
                steps.append(TranscriptStep(source="agent", timestamp=iso_timestamp(event.get("timestamp"))))
            call = TranscriptToolCall(
                id=as_str(event.get("tool_id")),
                name=str(event.get("tool_name")),
                arguments=event.get("parameters") if isinstance(event.get("parameters"), dict) else {},
            )
            steps[-1].tool_calls.append(call)
            if call.id:
                calls[call.id] = call
        elif kind == "tool_result" and (call := calls.get(str(event.get("tool_id")))) is not None:
            call.output = str(event.get("output") or "")
            call.is_error = event.get("status") == "error"
    return steps


def _fold_message(metrics: Metrics, message: dict[str, Any], tools: ToolLog) -> None:
    """One `gemini` message: a model response, its tokens and its tool calls."""
    tools.response()
    metrics.assistant_messages += 1
    if isinstance(message.get("model"), str):
        metrics.model = message["model"]
    tokens = message.get("tokens")
    if isinstance(tokens, dict):
        cached, thoughts = as_int(tokens.get("cached")), as_int(tokens.get("thoughts"))
        usage = ModelUsage(
            input_tokens=as_int(tokens.get("input")) - cached,
            cache_read_tokens=cached,
            output_tokens=as_int(tokens.get("output")) + thoughts,
            reasoning_tokens=thoughts,
            total_tokens=as_int(tokens.get("total")),
        )
        metrics.add_tokens(usage)
        if isinstance(message.get("model"), str):
            _add_model_tokens(metrics, message["model"], usage)
        else:
            metrics.unrecorded(UNNAMED_MODEL_GAP)
    else:
        # No usage: the stream was cut before its last chunk, and Gemini CLI took it as complete.
        metrics.transport_failures += 1
    calls = [c for c in message.get("toolCalls") or [] if isinstance(c, dict)]
    for call in calls:
        name = str(call.get("name"))
        arguments = call.get("args") if isinstance(call.get("args"), dict) else {}
        _tool_call(metrics, tools, name, as_str(call.get("id")), arguments)
        failed = call.get("status") == "error"
        metrics.tool_errors += failed
        tools.result(as_str(call.get("id")), _call_output(call), failed)
    if not calls and isinstance(message.get("content"), str) and message["content"]:
        metrics.final_text = message["content"]


def _fold_stream(metrics: Metrics, stream: list[dict[str, Any]], tools: ToolLog) -> None:
    """Tool calls, answer and tokens from the event stream alone, for a run without a session."""
    texts: list[str] = []
    for event in stream:
        kind = event.get("type")
        if kind == "init" and isinstance(event.get("model"), str):
            metrics.model = event["model"]
        elif kind == "tool_use":
            name = str(event.get("tool_name"))
            arguments = event.get("parameters") if isinstance(event.get("parameters"), dict) else {}
            _tool_call(metrics, tools, name, as_str(event.get("tool_id")), arguments)
            texts = []
        elif kind == "tool_result":
            failed = event.get("status") == "error"
            metrics.tool_errors += failed
            tools.result(as_str(event.get("tool_id")), str(event.get("output") or ""), failed)
        elif kind == "message" and event.get("role") == "assistant":
            texts.append(str(event.get("content", "")))
    if texts:
        metrics.final_text = "".join(texts)
    stats = (_result(stream) or {}).get("stats")
    if isinstance(stats, dict):
        metrics.add_tokens(_stats_usage(stats))
        models = stats.get("models") if isinstance(stats.get("models"), dict) else {}
        for model, table in models.items():
            if isinstance(table, dict):
                _add_model_tokens(metrics, str(model), _stats_usage(table))
        if metrics.total_tokens:
            metrics.incomplete(STREAM_ONLY_GAP)
            if "cached" not in stats:
                metrics.incomplete(NO_CACHED_GAP)


def _stats_usage(stats: dict[str, Any]) -> ModelUsage:
    """The tokens of the stream's `result` stats, or of one model's table in them (`models`)."""
    cached = as_int(stats.get("cached"))
    return ModelUsage(
        input_tokens=as_int(stats.get("input_tokens")) - cached,
        cache_read_tokens=cached,
        # The stream's stats keep no thoughts count: output is the candidates' alone.
        output_tokens=as_int(stats.get("output_tokens")),
        total_tokens=as_int(stats.get("total_tokens")),
    )


def _add_model_tokens(metrics: Metrics, model: str, usage: ModelUsage) -> None:
    part = metrics.per_model.setdefault(model, ModelUsage())
    for field, count in usage.model_dump(exclude={"cost_usd"}).items():
        setattr(part, field, getattr(part, field) + count)


def _tool_call(metrics: Metrics, tools: ToolLog, name: str, call_id: str | None, arguments: dict) -> None:
    metrics.tool_calls += 1
    metrics.tool_calls_by_name[name] = metrics.tool_calls_by_name.get(name, 0) + 1
    command, path = arguments.get("command"), arguments.get("file_path")
    if name == _SHELL_TOOL and isinstance(command, str):
        metrics.bash_commands.append(command)
        workdir = arguments.get("dir_path")
        tools.shell(call_id, command, workdir if isinstance(workdir, str) else None)
    elif name in _READ_TOOLS and isinstance(path, str):
        tools.read(call_id, path)
    else:
        tools.call(call_id)


def _call_output(call: dict[str, Any]) -> str:
    """What a tool call returned to the model: its functionResponse's output (or error)."""
    texts = []
    for part in call.get("result") or []:
        response = (part.get("functionResponse") or {}).get("response") if isinstance(part, dict) else None
        if isinstance(response, dict):
            texts.append(str(response.get("output", response.get("error", ""))))
    return "\n".join(texts)


def _workspace(messages: list[dict[str, Any]]) -> str | None:
    """The workspace directory the opening context names (`- **Workspace Directories:**`)."""
    for message in messages:
        for part in message.get("content") or []:
            text = part.get("text") if isinstance(part, dict) else None
            match = _WORKSPACE.search(text) if isinstance(text, str) else None
            if match:
                return match.group(1)
    return None


_WORKSPACE = re.compile(r"\*\*Workspace Directories:\*\*\n\s*- (\S+)")


def _result(stream: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((e for e in reversed(stream) if e.get("type") == "result"), None)


def price(messages: list[dict[str, Any]], mock: bool) -> tuple[float | None, dict[str, float], str]:
    """The cost of the model responses in a session, that of each model among them (the responses
    naming one), and its source (see the module docstring); (None, {}, why) where not priced."""
    total = 0.0
    by_model: dict[str, float] = {}
    for message in _model_messages(messages):
        tokens = message.get("tokens") if isinstance(message.get("tokens"), dict) else {}
        prompt, cached = as_int(tokens.get("input")), as_int(tokens.get("cached"))
        output = as_int(tokens.get("output")) + as_int(tokens.get("thoughts"))
        model = message.get("model")
        if mock:
            cost = (
                (prompt - cached) * MOCK_COST["input"]
                + cached * MOCK_COST["cache_read"]
                + output * MOCK_COST["output"]
            ) / 1_000_000
        elif not isinstance(model, str):
            return None, {}, f"{COST_SOURCE}: no model recorded"
        else:
            try:
                calc = genai_prices.calc_price(
                    genai_prices.Usage(input_tokens=prompt, cache_read_tokens=cached, output_tokens=output),
                    model,
                    provider_id=PRICE_PROVIDER,
                    genai_request_timestamp=as_time(message.get("timestamp")),
                )
            except LookupError:
                return None, {}, f"{COST_SOURCE}: model {model!r} not priced"
            cost = float(calc.total_price)
        total += cost
        if isinstance(model, str):
            by_model[model] = by_model.get(model, 0.0) + cost
    costs = {model: round_cost(cost) for model, cost in by_model.items()}
    return round_cost(total), costs, MOCK_COST_SOURCE if mock else COST_SOURCE


def _thinking_setting(settings_path: Path) -> str | None:
    """The thinking the run's settings asked for: the level (lower case), the level a Gemini 2.x
    budget stands for, or the budget in tokens."""
    try:
        settings = json.loads(settings_path.read_text())
    except (OSError, ValueError):
        return None
    for override in (settings.get("modelConfigs") or {}).get("overrides") or []:
        model_config = override.get("modelConfig") or {}
        config = (model_config.get("generateContentConfig") or {}).get("thinkingConfig")
        if isinstance(config, dict):
            level, budget = config.get("thinkingLevel"), config.get("thinkingBudget")
            if level is not None:
                return str(level).lower()
            levels = {tokens: name for name, tokens in EFFORT_BUDGETS.items()}
            return levels.get(budget, str(budget)) if budget is not None else None
    return None

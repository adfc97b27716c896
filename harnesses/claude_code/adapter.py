"""The Claude Code adapter: `claude -p --output-format stream-json` in the workspace, isolated.

Each run gets its own HOME (`run_dir/home`) and CLAUDE_CONFIG_DIR (`run_dir/config`) and an
environment built from nothing, so no user configuration, inherited variable or earlier session
reaches the agent. Settings come from the config directory (written by the rig) and the
workspace only (`--setting-sources=user,project`); MCP servers only from the command line (none).

Conditions are mapped onto what Claude Code reads, and `condition_mapping` says how:

- Claude Code reads CLAUDE.md, never AGENTS.md. When the workspace holds AGENTS.md and no
  CLAUDE.md, the config directory gets a user-level CLAUDE.md that imports it by absolute path
  (`@/.../AGENTS.md`). The text then reaches the model in the first user message like a workspace
  CLAUDE.md would, labelled as the user's global instructions, without adding a file to the
  workspace (which would show in the diff and in `git status`).
- skills are copied to `CLAUDE_CONFIG_DIR/skills/<name>/`, where Claude Code lists them for its
  Skill tool; tools become `--tools=...` (`--allowedTools` only pre-approves tools, and with
  permissions bypassed it changes nothing the model sees); thinking becomes `--effort` (off:
  thinking disabled through `--settings`, which a model that rejects disabled thinking, like
  2.1.332's default claude-opus-5-5, ignores: the transcript shows what was sent, and the
  mapping then says thinking was kept).

Provider failures must end a run in seconds, not minutes: retries are off
(CLAUDE_CODE_MAX_RETRIES=0) and API_TIMEOUT_MS bounds a request that never gets an answer. A
stream that starts and then goes silent is not bounded by Claude Code for a non-Anthropic base
URL (its byte watchdog is first-party only, its event watchdog waits at least 300 s): the rig's
silence watchdog (`stall_s`) ends it.

`parse_session` reads only `run_dir/stdout.log` (the stream-json events) and
`run_dir/session.jsonl` (Claude Code's transcript, copied out of the config directory), plus the
command line of the run, so stored sessions can be parsed again later (harnesses.claude_code.session).
"""

import json
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from harnesses.claude_code.session import (
    SKILL_TOOL,
    THINKING_OFF_SETTINGS,
    load_session,
    parse_files,
    pending_tool_use,
    read_transcript,
    usage_of,
)
from harnesses.cli_harness import CliHarness, install_extension, install_skill
from harnesses.factors import Factors, check_condition, merge
from harnesses.factors import mapping as factor_mapping
from harnesses.logs import as_str, fill_per_model, read_jsonl
from harnesses.mock_model.anthropic_messages import AnthropicMessages
from harnesses.mock_model.tools import ToolCall, ToolMap
from rig.confine.run_budget import LiveUsage
from rig.schema import AgentRun, Condition, Metrics, Transcript

SESSION_NAME = "session.jsonl"
INFRA_SIGNATURE = "claude_api_error"
SETTING_SOURCES = "user,project"
MOCK_API_TIMEOUT_MS = 30_000
# A real provider may take long to send the first byte of a large-context answer.
REAL_API_TIMEOUT_MS = 300_000
EFFORTS = ("low", "medium", "high", "xhigh", "max")
# Thinking levels other harnesses know, mapped to the nearest Claude Code effort.
EFFORT_ALIASES = {"minimal": "low"}
THINKING_OFF = ("off", "none")
# Thinking types of a request without thinking (`none`: no thinking parameter at all).
THINKING_NOT_SENT = ("disabled", "none")
# Harness-neutral tool names (Pi's) to Claude Code's; other names pass through unchanged.
TOOL_NAMES = {
    "bash": "Bash",
    "read": "Read",
    "edit": "Edit",
    "write": "Write",
    "grep": "Grep",
    "find": "Glob",
    "glob": "Glob",
}
# Claude Code reads the key from this variable whatever the provider (the mock's too).
KEY_ENV = "ANTHROPIC_API_KEY"
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
SETTINGS_FILE = "settings.json"
# harness_settings: keys of the user settings that change the agent, not its endpoint, key,
# environment, model or where it logs.
SETTINGS_KEYS = frozenset(
    {
        "hooks",
        "permissions",
        "autoCompactEnabled",
        "autoCompactWindow",
        "includeCoAuthoredBy",
        "cleanupPeriodDays",
    }
)
# harness_args: 2.1.332's options that change neither logs, model, endpoint nor the sandbox.
ARGS = {
    "--autocompact": 1,
    "--disallowedTools": 1,
    "--exclude-dynamic-system-prompt-sections": 0,
    "--disable-slash-commands": 0,
}
HOOKS_DIR = "hooks"
APPENDED_PROMPT = "append-system-prompt.md"


def _absolute(path: str, cwd: str | None) -> str:
    """`path` made absolute with the working directory, as a real model writes it; Claude Code also
    accepts a workspace-relative path, the fallback when no working directory is known."""
    return path if path.startswith("/") or cwd is None else f"{cwd.rstrip('/')}/{path}"


# The mock model's steps as Claude Code's built-in tools.
MOCK_TOOLS = ToolMap(
    shell=lambda command, cwd: ToolCall("Bash", {"command": command}),
    read=lambda path, cwd: ToolCall("Read", {"file_path": _absolute(path, cwd)}),
    write=lambda path, content, cwd: ToolCall(
        "Write", {"file_path": _absolute(path, cwd), "content": content}
    ),
)


def stream_usage(event: dict[str, Any]) -> LiveUsage | None:
    """The usage of one response as stream-json reports it: an `assistant` event per content block,
    each with the usage at the start of the response (input and cache exact, output as far as it
    got), keyed by the message id; no cost. The live usage reader of rig.confine.run_budget."""
    message = event.get("message")
    if event.get("type") != "assistant" or not isinstance(message, dict):
        return None
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return None
    return LiveUsage(usage_of(usage), key=as_str(message.get("id")), model=as_str(message.get("model")))


def final_answer(event: dict[str, Any]) -> bool:
    """Whether a stream-json event ends Claude Code's run: its `result`."""
    return event.get("type") == "result"


class ClaudeCodeHarness(CliHarness):
    """A HarnessAdapter for Claude Code (`@anthropic-ai/claude-code`)."""

    name = "claude-code"
    package = "@anthropic-ai/claude-code"
    binary = "claude"
    bin_env = "RIG_CLAUDE_BIN"
    mock_protocol = AnthropicMessages(MOCK_TOOLS)
    factors = Factors(
        system_prompt=f"--append-system-prompt-file CLAUDE_CONFIG_DIR/{APPENDED_PROMPT}",
        settings_file=f"CLAUDE_CONFIG_DIR/{SETTINGS_FILE}",
        settings_keys=SETTINGS_KEYS,
        args=ARGS,
        extensions=f"as PreToolUse hook commands (copied to CLAUDE_CONFIG_DIR/{HOOKS_DIR}/)",
        thinking="--effort <level> (off: thinking disabled through --settings)",
    )
    live_usage = staticmethod(stream_usage)
    final_event = staticmethod(final_answer)
    usage_fields = frozenset({"input", "output", "cache_read", "cache_write", "reasoning"})
    compaction_fields = frozenset({"compactions", "compaction_tokens_before", "compaction_tokens_after"})
    # The study's earliest arm (experiments/claude_code_compaction.toml), every response reporting a
    # context past it: it compacts, refills at once, and its own breaker stops it after three.
    forced_compaction = {
        "harness_options": {"mock_usage": {"input": 95000, "output": 100, "cache_read": 0}},
        "harness_settings": {"autoCompactEnabled": True, "autoCompactWindow": 100000},
    }
    # A SessionEnd hook runs after the `result` event is written (a Stop hook runs before it, a
    # stall); Claude Code cuts it after 60 s (its timeout is in seconds), far past after_final_s.
    silent_after_final = {
        "harness_settings": {
            "hooks": {
                "SessionEnd": [{"hooks": [{"type": "command", "command": "sleep 600", "timeout": 600}]}]
            }
        }
    }
    lacks = {
        "compaction_tokens": "Claude Code counts its summarization requests in its totals without "
        "telling them apart",
    }

    def default_base_url(self) -> str:
        """Anthropic's API, which Claude Code calls without ANTHROPIC_BASE_URL."""
        return ANTHROPIC_BASE_URL

    def check_settings(self) -> None:
        """Refuse a thinking level Claude Code lacks."""
        if self.thinking is not None:
            thinking_args(self.thinking)

    def key_env(self) -> str:
        """ANTHROPIC_API_KEY, for every provider."""
        return KEY_ENV

    def run(self, workdir: Path, prompt: str, condition: Condition, run_dir: Path, timeout: int) -> AgentRun:
        """Run Claude Code on `prompt` in `workdir`; streams, transcript and config go to `run_dir`."""
        check_condition(self.name, self.factors, condition)
        options = condition.harness_options
        run_dir.mkdir(parents=True, exist_ok=True)
        home, config = run_dir / "home", run_dir / "config"
        home.mkdir(exist_ok=True)
        config.mkdir(exist_ok=True)
        mapping = [context_mapping(workdir, config)]
        hooks = [install_extension(e, config / HOOKS_DIR) for e in condition.extensions]
        write_settings(config, condition, hooks)
        skills = [install_skill(skill, config / "skills").name for skill in condition.skills]
        if skills:
            mapping.append(f"skills installed in CLAUDE_CONFIG_DIR/skills: {', '.join(skills)}")
        session_id = str(uuid.uuid4())
        command = [
            str(self.cli()),
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            "--strict-mcp-config",
            f"--setting-sources={SETTING_SOURCES}",
            "--session-id",
            session_id,
        ]
        if self.model:
            command += ["--model", self.model]
        thinking = self.thinking_level(condition)
        if thinking is not None:
            args = thinking_args(thinking)
            command += args
            if thinking in EFFORT_ALIASES or thinking in THINKING_OFF:
                mapping.append(f"thinking {thinking}: {' '.join(args)}")
        if condition.tools is not None:
            names = [TOOL_NAMES.get(t, t) for t in condition.tools]
            # Skills are offered through the Skill tool: without it, installed skills are never listed.
            if skills and SKILL_TOOL not in names:
                names.append(SKILL_TOOL)
            tools = ",".join(names)
            command.append(f"--tools={tools}")
            mapping.append(f"tools: --tools={tools}")
        if condition.append_system_prompt is not None:
            # A file keeps the text out of the command line (and the record's copy of it).
            (config / APPENDED_PROMPT).write_text(condition.append_system_prompt, encoding="utf-8")
            command += ["--append-system-prompt-file", str(config / APPENDED_PROMPT)]
        command += condition.harness_args
        mapping += factor_mapping(self.factors, condition, [h.name for h in hooks])
        # `--` keeps a prompt that starts with a dash from being read as an option.
        command += ["--", prompt]
        self.condition_mapping = "; ".join(m for m in mapping if m) or None
        # Watching the transcript too keeps a long tool call with a quiet stdout from looking stalled.
        watched = config / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(workdir)) / f"{session_id}.jsonl"
        run = self.run_process(
            command,
            workdir,
            condition,
            run_dir,
            timeout,
            watched,
            lambda base_url: self._env(home, config, base_url, options),
        )
        saved = _save_transcript(config, session_id, run_dir / SESSION_NAME)
        if thinking in THINKING_OFF:
            kept = sorted({kind for kind in sent_thinking(saved) if kind not in THINKING_NOT_SENT})
            # A model that rejects disabled thinking (2.1.332's default, claude-opus-5-5) gets
            # adaptive thinking whatever the settings say: the record must not claim "off".
            if kept:
                mapping.append(f"thinking off not honoured: Claude Code sent thinking {', '.join(kept)}")
                self.condition_mapping = "; ".join(m for m in mapping if m)
        return run.model_copy(update={"session_path": saved})

    def parse_session(self, run: AgentRun) -> Metrics:
        """Metrics from stdout.log and session.jsonl alone (missing files give zero metrics)."""
        return fill_per_model(parse_files(run.stdout_path, run.session_path, run.command))

    @staticmethod
    def transcript(run: AgentRun) -> Transcript:
        """The conversation of the saved stream and transcript (see `read_transcript`)."""
        return read_transcript(run.stdout_path, run.session_path)

    def infra_signature(self, run: AgentRun, metrics: Metrics) -> str | None:
        """`claude_api_error` when Claude Code reports a provider error; else None (the shared rules)."""
        return INFRA_SIGNATURE if load_session(run.stdout_path, run.session_path).api_error else None

    def tool_pending(self, run: AgentRun) -> bool:
        """Whether the last response's tool_use blocks had not all got a tool_result.

        Claude Code prints (and records in its transcript) the assistant message calling a tool
        before it runs it, and a user message with the tool_result after. The stream decides;
        the transcript stands in when the stream holds no response (its file lost or empty).
        """
        stream = read_jsonl(run.stdout_path)
        if any(e.get("type") == "assistant" for e in stream):
            return pending_tool_use(stream)
        return pending_tool_use(read_jsonl(run.session_path))

    def _env(self, home: Path, config: Path, base_url: str | None, options: dict[str, Any]) -> dict[str, str]:
        default_timeout = MOCK_API_TIMEOUT_MS if self.provider.kind == "mock" else REAL_API_TIMEOUT_MS
        extra = {
            "CLAUDE_CONFIG_DIR": str(config),
            # Without it the CLI contacts Anthropic's hosts directly, whatever the base URL.
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            # As root, --dangerously-skip-permissions refuses to run outside a declared sandbox.
            "IS_SANDBOX": "1",
            # A provider failure ends the run in seconds; the rig quarantines and reruns it.
            "CLAUDE_CODE_MAX_RETRIES": str(int(options.get("max_retries", 0))),
            "API_TIMEOUT_MS": str(int(options.get("api_timeout_ms", default_timeout))),
            # The Bash tool and the system prompt name the shell; unset, the prompt says "unknown".
            "SHELL": "/bin/bash",
        }
        if base_url:
            extra["ANTHROPIC_BASE_URL"] = base_url
        return self.environment(home, extra)


def write_settings(config: Path, condition: Condition, hooks: list[Path]) -> None:
    """The user settings of the run (CLAUDE_CONFIG_DIR/settings.json): the condition's
    harness_settings, with each hook command (made executable) run before every tool call.
    Nothing is written for a condition with neither."""
    if not condition.harness_settings and not hooks:
        return
    for hook in hooks:
        hook.chmod(0o755)
    pre = (
        [{"matcher": "*", "hooks": [{"type": "command", "command": str(h)} for h in hooks]}] if hooks else []
    )
    settings = merge({}, condition.harness_settings)
    if pre:
        existing = settings.get("hooks", {}).get("PreToolUse", [])
        settings = merge(settings, {"hooks": {"PreToolUse": [*existing, *pre]}})
    (config / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")


def thinking_args(thinking: str) -> list[str]:
    """The command-line arguments for a thinking level; ValueError for one Claude Code lacks."""
    if thinking in THINKING_OFF:
        return [f"--settings={THINKING_OFF_SETTINGS}"]
    effort = EFFORT_ALIASES.get(thinking, thinking)
    if effort not in EFFORTS:
        known = ", ".join((*THINKING_OFF, *EFFORT_ALIASES, *EFFORTS))
        raise ValueError(f"claude-code has no thinking level {thinking!r}; use one of {known}")
    return ["--effort", effort]


def sent_thinking(transcript: Path | None) -> list[str]:
    """The thinking type (`adaptive`, `enabled`, `disabled`, or `none` when absent) of each model
    request in the transcript, from its `api-request` records (2.1.332; 2.1.197 wrote none)."""
    kinds = []
    for record in read_jsonl(transcript):
        if record.get("type") != "api-request" or not isinstance(record.get("params"), dict):
            continue
        thinking = record["params"].get("thinking")
        kinds.append((as_str(thinking.get("type")) or "none") if isinstance(thinking, dict) else "none")
    return kinds


def context_mapping(workdir: Path, config: Path) -> str | None:
    """Make AGENTS.md reach Claude Code when it has no CLAUDE.md; describe what was done."""
    agents, claude = workdir / "AGENTS.md", workdir / "CLAUDE.md"
    if claude.exists():
        if agents.exists():
            return "CLAUDE.md read natively; AGENTS.md present but not imported"
        return "CLAUDE.md read natively"
    if not agents.exists():
        return None
    (config / "CLAUDE.md").write_text(f"@{agents.resolve()}\n")
    return f"AGENTS.md imported via CLAUDE_CONFIG_DIR/CLAUDE.md (@{agents.resolve()})"


def _save_transcript(config: Path, session_id: str, target: Path) -> Path | None:
    """Copy Claude Code's transcript of `session_id` out of the config directory."""
    found = sorted((config / "projects").glob(f"*/{session_id}.jsonl"))
    if not found:
        return None
    shutil.copyfile(found[0], target)
    return target

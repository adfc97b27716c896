"""The Codex adapter: `codex exec --json` (@openai/codex) with its own CODEX_HOME and HOME.

Isolation: every run gets `run_dir/codex-home` (CODEX_HOME) holding only the `config.toml` written
here (and the condition's skills), and `run_dir/home` (HOME); the environment is built from nothing
(`cli.base_env`) plus CODEX_HOME and the key variable, so nothing of the parent's (CI=true, proxies,
user config) reaches Codex. `--strict-config` makes Codex refuse a config key it does not know, so
a renamed switch fails loudly instead of being ignored. Codex runs its commands through a login
shell, whose /etc/profile resets PATH on many systems: `run_dir/home/.profile` restores the run's
PATH, in which the rig's interpreter (pinned ruff and pytest) comes first, so the pack's gate run
as documented in the agent's shell (`python <script>`) works.

`config.toml`: the model (default `gpt-5.5` for the mock: Codex 0.171 builds its tool set from the
model slug, and an unknown slug loses the apply_patch tool), one provider (`mock`, or `rig` for a
real provider) with `wire_api = "responses"`, no request or stream retries (a failed request ends
the turn and the rig quarantines and reruns the run: Codex's own HTTP retries leave no trace in any
log) and a bounded stream idle timeout; no update check, analytics, feedback or plugins (each
contacts outside hosts) and no unbounded connection retries (a dead server would hang forever).
A server that accepts a request and never answers still hangs Codex (the idle timeout starts with
the response): the rig's silence watchdog (`stall_s`) and wall timeout end such a run, as stalled.
The thinking level (the condition's, else the experiment's) is `-c model_reasoning_effort=...` on
the command line, checked against OpenAI's efforts because Codex forwards any string.

Provider: `kind = "mock"` serves the mock model (all wire protocols) for the run's duration; `kind =
"real"` uses `base_url` (default OpenAI's) with the key from `api_key_env`, named as `env_key`.

Conditions: AGENTS.md is a workspace overlay Codex reads natively (from the git root, the workspace,
down to the cwd; the rig's CODEX_HOME holds none). Skills: Codex 0.171 lists every
`$CODEX_HOME/skills/<name>/SKILL.md` in its prompt (next to its bundled `.system` skills, present in
every arm), so each skill directory is copied there under its `name:`. Tools (`condition.tools`,
Codex's own tool names): the tools Codex 0.171 can switch off are switched off unless listed
(`exec_command`/`write_stdin` via features.shell_tool, `view_image`, the three goal tools via
features.goals, `web_search`, `request_user_input`); `apply_patch` and `tool_search` cannot be
removed, so a tool list must name them; unknown names are refused. What was mapped is recorded in
`condition_mapping`.

Logs: stdout.log is the `--json` event stream. Codex writes its rollout to
`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<ts>-<thread>.jsonl`, a record per model response as it
goes, which is what a run budget reads while it runs (`session_usage`: the stream reports usage
only when the turn completes); after the run it is copied to
`run_dir/session.jsonl` and CODEX_HOME is pruned to config.toml and the installed skills (Codex's
databases and bundled skills are 2 MB a run and evidence of nothing). `parse_session` reads
session.jsonl and stdout.log only, through harnesses.codex.session (which also prices the run).
"""

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import tomli_w

from harnesses.cli_harness import CliHarness, install_skill
from harnesses.codex.session import LiveRollout, parse_files, pending_tool_call, read_transcript, signature
from harnesses.factors import Factors, check_condition, merge
from harnesses.factors import mapping as factor_mapping
from harnesses.logs import fill_per_model, read_jsonl
from harnesses.mock_model.openai_responses import OpenAIResponses
from harnesses.mock_model.tools import ToolCall, ToolMap
from rig.confine.session_usage import SessionUsage
from rig.schema import AgentRun, Condition, Metrics, Transcript

BIN_ENV = "RIG_CODEX_BIN"
SESSION_FILE = "session.jsonl"
CODEX_HOME_DIR = "codex-home"
HOME_DIR = "home"
MOCK_PROVIDER = "mock"
REAL_PROVIDER = "rig"
MOCK_MODEL = "gpt-5.5"
MOCK_KEY_ENV = "RIG_MOCK_API_KEY"
OPENAI_BASE_URL = "https://api.openai.com/v1"
STREAM_IDLE_TIMEOUT_MS = 20_000
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
# condition.tools: Codex 0.171's switchable tools, as (tool names, config path, value that removes
# them). Each was checked against the tool list of a real request.
TOOL_SWITCHES: tuple[tuple[frozenset[str], tuple[str, ...], bool | str], ...] = (
    (frozenset({"exec_command", "write_stdin"}), ("features", "shell_tool"), False),
    (frozenset({"view_image"}), ("features", "view_image"), False),
    (frozenset({"get_goal", "create_goal", "update_goal"}), ("features", "goals"), False),
    (frozenset({"web_search"}), ("web_search",), "disabled"),
    (frozenset({"request_user_input"}), ("tools", "experimental_request_user_input", "enabled"), False),
)
FIXED_TOOLS = frozenset({"apply_patch", "tool_search"})
# The rollouts below the watched `$CODEX_HOME/sessions`: YYYY/MM/DD/rollout-<ts>-<thread>.jsonl.
_DIGITS = "[0-9]"
ROLLOUTS = SessionUsage(
    layout=(_DIGITS * 4, _DIGITS * 2, _DIGITS * 2, "rollout-*.jsonl"),
    reader=LiveRollout,
)
# exec_command returns after `yield_time_ms` even if the command still runs (default 10 s, at most
# 30 s); the longest wait keeps a slow gate from turning into a session the next step never polls.
_YIELD_TIME_MS = 30000


def add_file_patch(path: str, content: str) -> str:
    """An apply_patch patch that creates `path` with `content` (or replaces it: Add File overwrites)."""
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    body = "".join(f"+{line}\n" for line in lines)
    return f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch"


# The mock model's steps as Codex's tools: a shell command and a read (`cat`) through exec_command,
# a write as apply_patch's free-form patch.
MOCK_TOOLS = ToolMap(
    shell=lambda command, cwd: ToolCall("exec_command", {"cmd": command, "yield_time_ms": _YIELD_TIME_MS}),
    read=lambda path, cwd: ToolCall(
        "exec_command", {"cmd": f"cat {shlex.quote(path)}", "yield_time_ms": _YIELD_TIME_MS}
    ),
    write=lambda path, content, cwd: ToolCall("apply_patch", add_file_patch(path, content)),
)


# harness_settings: config.toml keys of 0.171 that change the agent, not its provider, model,
# sandbox, features or where it logs (--strict-config refuses a misspelt one when it runs).
SETTINGS_KEYS = frozenset(
    {
        "model_auto_compact_token_limit",
        "model_context_window",
        "model_reasoning_summary",
        "model_verbosity",
        "tool_output_token_limit",
        "project_doc_max_bytes",
        "hide_agent_reasoning",
    }
)


def final_answer(event: dict[str, Any]) -> bool:
    """Whether a `codex exec --json` event ends its run: `turn.completed` (exec runs one turn)."""
    return event.get("type") == "turn.completed"


class CodexHarness(CliHarness):
    """A HarnessAdapter for Codex (`codex exec`), version-pinned in harnesses/node.

    `condition_mapping` says how skills and tools were realised beyond the workspace overlays.
    """

    name = "codex"
    package = "@openai/codex"
    binary = "codex"
    bin_env = BIN_ENV
    mock_protocol = OpenAIResponses(MOCK_TOOLS)
    mock_key_env = MOCK_KEY_ENV
    mock_url_suffix = "/v1"
    final_event = staticmethod(final_answer)
    # `codex exec --json` reports usage only when its turn completes: the rollout, as it grows.
    session_usage = ROLLOUTS
    factors = Factors(
        system_prompt="config.toml developer_instructions (a developer message after its own instructions)",
        settings_file="$CODEX_HOME/config.toml",
        settings_keys=SETTINGS_KEYS,
        thinking="-c model_reasoning_effort=<level>",
    )
    usage_fields = frozenset({"input", "output", "cache_read", "cache_write", "reasoning"})
    compaction_fields = frozenset({"compactions", "compaction_tokens"})
    # A first response past a low auto-compact limit, small ones after: one compaction.
    forced_compaction = {
        "harness_options": {
            "mock_usage": {"input": 120000, "output": 100, "cache_read": 0},
            "mock_later_usage": {"input": 1000, "output": 100, "cache_read": 500},
        },
        "harness_settings": {"model_auto_compact_token_limit": 50000},
    }
    lacks = {
        "silent_after_final": "Codex 0.171 waits for nothing after turn.completed that can hold it: "
        "SessionEnd hooks are cut to 3 s, the notify program and MCP servers are not waited for "
        "(SIGTERM), and Stop hooks run before turn.completed (a stall, not this fault)",
        "harness_args": "its options are config.toml keys, which harness_settings set",
        "extensions": "Codex has no extension mechanism the rig can load one through",
        "compaction_tokens_before": "Codex's rollout records no context size around a compaction",
        "compaction_tokens_after": "Codex's rollout records no context size around a compaction",
    }

    def default_base_url(self) -> str:
        """OpenAI's API, Codex's own provider."""
        return OPENAI_BASE_URL

    def check_settings(self) -> None:
        """A real provider needs a model (Codex has no default for another provider) and a key variable."""
        if self.provider.kind == "real" and not (self.model and self.provider.api_key_env):
            raise ValueError("a real provider for codex needs a model and provider.api_key_env")

    def effort(self, condition: Condition) -> str | None:
        """The reasoning effort of a run: the condition's thinking level, else the experiment's."""
        effort = self.thinking_level(condition)
        if effort is not None and effort not in REASONING_EFFORTS:
            raise ValueError(
                f"thinking {effort!r} is no reasoning effort codex knows; use one of {REASONING_EFFORTS}"
            )
        return effort

    def command(self, workdir: Path, prompt: str, effort: str | None) -> list[str]:
        """The `codex exec` command line for one run (`--` then the prompt last)."""
        command = [
            str(self.cli()),
            "exec",
            "--json",
            "--strict-config",
            "--skip-git-repo-check",
            "-C",
            str(workdir),
            "--dangerously-bypass-approvals-and-sandbox",
        ]
        if effort is not None:
            command += ["-c", f"model_reasoning_effort={json.dumps(effort)}"]
        # `--` keeps a prompt that starts with "-" from being read as an option.
        return [*command, "--", prompt]

    def config(
        self, base_url: str, tools: list[str] | None, condition: Condition | None = None
    ) -> dict[str, Any]:
        """The content of config.toml for a provider at `base_url` (see the module docstring), with
        `condition`'s appended instructions and harness_settings."""
        mock = self.provider.kind == "mock"
        provider_id = MOCK_PROVIDER if mock else REAL_PROVIDER
        config: dict[str, Any] = {}
        model = self.model or (MOCK_MODEL if mock else None)
        if model:
            config["model"] = model
        config |= {
            "model_provider": provider_id,
            "check_for_update_on_startup": False,
            "model_providers": {
                provider_id: {
                    "name": provider_id if mock else str(self.provider.name or provider_id),
                    "base_url": base_url,
                    "wire_api": "responses",
                    "env_key": MOCK_KEY_ENV if mock else str(self.provider.api_key_env),
                    "request_max_retries": 0,
                    "stream_max_retries": 0,
                    "stream_idle_timeout_ms": STREAM_IDLE_TIMEOUT_MS,
                }
            },
            "analytics": {"enabled": False},
            "feedback": {"enabled": False},
            "features": {"plugins": False, "unbounded_connection_retries": False},
        }
        for path, value in tool_switches(tools):
            table = config
            for key in path[:-1]:
                table = table.setdefault(key, {})
            table[path[-1]] = value
        if condition is None:
            return config
        if condition.append_system_prompt is not None:
            config["developer_instructions"] = condition.append_system_prompt
        return merge(config, condition.harness_settings)

    def run(self, workdir: Path, prompt: str, condition: Condition, run_dir: Path, timeout: int) -> AgentRun:
        """Run Codex in `workdir`; streams, rollout copy and CODEX_HOME go to `run_dir`."""
        check_condition(self.name, self.factors, condition)
        effort = self.effort(condition)
        tool_switches(condition.tools)  # refuse a tool list this version cannot realise before starting
        run_dir.mkdir(parents=True, exist_ok=True)
        codex_home, home = run_dir / CODEX_HOME_DIR, run_dir / HOME_DIR
        for folder in (codex_home, home):
            # A rollout left by an earlier run in the same folder must not be taken for this one's.
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
        skills = [install_skill(skill, codex_home / "skills") for skill in condition.skills]
        parts = [mapping(skills, condition.tools), *factor_mapping(self.factors, condition)]
        self.condition_mapping = "; ".join(p for p in parts if p) or None
        env = self.environment(home, {"CODEX_HOME": str(codex_home)})
        # Codex runs commands in a login shell; /etc/profile may reset PATH, ~/.profile sets it back.
        (home / ".profile").write_text(f"export PATH={shlex.quote(env['PATH'])}\n")
        command = self.command(workdir, prompt, effort)
        # The rollout's name is known only once it exists: the watchdog watches its directory.
        sessions = codex_home / "sessions"
        sessions.mkdir(exist_ok=True)

        def connect(base_url: str | None) -> dict[str, str]:
            write_config(codex_home, self.config(base_url or OPENAI_BASE_URL, condition.tools, condition))
            return env

        run = self.run_process(command, workdir, condition, run_dir, timeout, sessions, connect)
        session = save_session(codex_home, run_dir, run.stdout_path)
        prune_codex_home(codex_home, skills)
        return run.model_copy(update={"session_path": session})

    def parse_session(self, run: AgentRun) -> Metrics:
        """Metrics from the saved rollout copy and event stream alone."""
        return fill_per_model(parse_files(run.session_path, run.stdout_path))

    @staticmethod
    def transcript(run: AgentRun) -> Transcript:
        """The conversation of the saved rollout (else the event stream), see `read_transcript`."""
        return read_transcript(run.session_path, run.stdout_path)

    def infra_signature(self, run: AgentRun, metrics: Metrics) -> str | None:
        """`codex_<codex_error_info>` of a failed turn (e.g. codex_internal_server_error), else None."""
        return signature(read_jsonl(run.session_path), read_jsonl(run.stdout_path))

    def tool_pending(self, run: AgentRun) -> bool:
        """Whether the last response's tool calls had not all got their output item.

        The rollout decides: Codex records a response's call items (function_call,
        custom_tool_call, ...) before it runs them and each `*_output` item once the tool has
        returned to the model, for every tool it runs. The stream shows commands and patches
        only, and keeps a command that outlived its `yield_time_ms` in progress though its
        output already went to the model: it stands in only when there is no rollout.
        """
        return pending_tool_call(run.session_path, run.stdout_path)


def tool_switches(tools: list[str] | None) -> list[tuple[tuple[str, ...], bool | str]]:
    """The config settings that leave Codex with `tools` (None: Codex's default set, no settings)."""
    if tools is None:
        return []
    known = FIXED_TOOLS.union(*(names for names, _, _ in TOOL_SWITCHES))
    unknown = sorted(set(tools) - known)
    if unknown:
        raise ValueError(f"codex has no tools {unknown}; its tools are {sorted(known)}")
    missing = sorted(FIXED_TOOLS - set(tools))
    if missing:
        raise ValueError(
            f"codex 0.171 cannot remove the tools {missing}: a tool list for codex must name them"
        )
    return [(path, value) for names, path, value in TOOL_SWITCHES if not names & set(tools)]


def mapping(skills: list[Path], tools: list[str] | None) -> str | None:
    """What the record says about how skills and tools were realised; None when nothing was mapped."""
    parts = []
    if skills:
        parts.append("skills copied to $CODEX_HOME/skills/: " + ", ".join(p.name for p in skills))
    if tools is not None:
        removed = sorted(name for names, _, _ in TOOL_SWITCHES if not names & set(tools) for name in names)
        parts.append("tools removed by config: " + (", ".join(removed) or "none"))
    return "; ".join(parts) or None


def toml(config: dict[str, Any]) -> str:
    """`config` as the text of config.toml."""
    return tomli_w.dumps(config)


def write_config(codex_home: Path, config: dict[str, Any]) -> None:
    """Write `$CODEX_HOME/config.toml`."""
    (codex_home / "config.toml").write_text(toml(config))


def save_session(codex_home: Path, run_dir: Path, stdout_path: Path) -> Path | None:
    """Copy the run's rollout to `run_dir/session.jsonl`; None if Codex wrote none.

    The rollout of the thread named by the stream's `thread.started` wins; without one, the newest
    (names start with a timestamp).
    """
    rollouts = sorted(codex_home.glob("sessions/**/rollout-*.jsonl"), key=lambda p: p.name)
    if not rollouts:
        return None
    thread = next(
        (e.get("thread_id") for e in read_jsonl(stdout_path) if e.get("type") == "thread.started"), None
    )
    chosen = next((p for p in rollouts if thread and p.name.endswith(f"-{thread}.jsonl")), rollouts[-1])
    target = run_dir / SESSION_FILE
    shutil.copyfile(chosen, target)
    return target


def prune_codex_home(codex_home: Path, skills: list[Path]) -> None:
    """Keep config.toml and the installed skills; remove Codex's databases, caches and bundled skills."""
    keep = {codex_home / "config.toml", codex_home / "skills", *skills}
    for path in sorted(codex_home.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path in keep or any(path.is_relative_to(s) for s in skills):
            continue
        if path.is_dir() and not path.is_symlink():
            if not any(path.iterdir()):
                path.rmdir()
        else:
            path.unlink(missing_ok=True)

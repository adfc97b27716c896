"""The OpenCode adapter: `opencode run --format json` (opencode-ai) with its own HOME, XDG dirs and config.

Isolation: every run gets `run_dir/home` (HOME), `run_dir/xdg/{config,data,cache,state}` (the XDG
dirs, where OpenCode keeps its global config, SQLite database, log and caches) and
`run_dir/opencode-config` (OPENCODE_CONFIG_DIR) holding only the `opencode.json` written here and
the condition's skills; the environment is built from nothing (`cli.base_env`). OpenCode also reads
`opencode.json` and `.opencode/` from the workspace up to its git root: the workspace is the agent's
(the rig makes it a git repository, so the search stops there). `OPENCODE_DISABLE_PROJECT_CONFIG`
would stop that search too, but it also stops the workspace AGENTS.md, so it stays unset.

Nothing reaches the network but the provider: `share: "disabled"` (and OPENCODE_DISABLE_SHARE),
`autoupdate: false` (and OPENCODE_DISABLE_AUTOUPDATE), no models.dev catalogue fetch for the mock
(OPENCODE_DISABLE_MODELS_FETCH: the mock's provider and model are defined in full here), no default
or external plugins (OPENCODE_DISABLE_DEFAULT_PLUGINS; `--pure` unless the condition has
extensions, see below), no LSP servers or formatters
(`lsp: false`, `formatter: false`, OPENCODE_DISABLE_LSP_DOWNLOAD), no Claude Code fallbacks
(OPENCODE_DISABLE_CLAUDE_CODE: no `~/.claude/CLAUDE.md`, workspace CLAUDE.md or `~/.claude` skills)
and no external skill scans (OPENCODE_DISABLE_EXTERNAL_SKILLS). `snapshot: false`: OpenCode's undo
snapshots (a second git repository of the workspace, updated every step) serve no purpose here.
`--title` names the session, which spares the model request OpenCode otherwise makes for a title.
At start-up OpenCode also installs `@opencode-ai/plugin` from the npm registry into every config
dir, in the background, unless the dir already has `node_modules` and a `package-lock.json` whose
root depends on it: each config dir gets that empty stand-in (`pin_plugin_dependency`), so no run
fetches anything (a plugin the condition loads must not import it at run time: it is not there).
Every permission is `allow` (but for the condition's own rules), so tools run headless without asking.

Provider (`opencode.json` `provider`):
- `kind = "mock"`: a provider `mock` (`@ai-sdk/openai-compatible`, OpenAI Chat Completions) at the
  mock's base URL + `/v1`, with one model (`model`, default `mock-model`) priced like a mid-range
  model (`cost`, USD per million tokens) so OpenCode computes a cost.
- `kind = "real"` with `base_url`: an OpenAI-compatible provider `provider.name` at that URL.
  Without `base_url`: OpenCode's built-in provider `provider.name` (its models.dev catalogue is then
  fetched). The key is `{env:<api_key_env>}` in the provider's options: it never appears on the
  command line or in a file. The model is `provider.name/model`.
Each provider request waits at most `provider_timeout_ms` (harness_options, default 30 s) for
response headers and between stream chunks. OpenCode 1.18.33 has no setting for its own retries:
it retries a failed request (HTTP 5xx, 429, connection errors, timeouts) 5 times, 2 s to 30 s apart,
so a dead or erroring provider ends the run after about 60-75 s with an `error` event, or the rig's
silence watchdog ends it first.

Conditions: AGENTS.md is a workspace overlay OpenCode reads natively (from the cwd up to the git
root; the config dir holds none). Each skill of `condition.skills` is copied into
`opencode-config/skills/<name>`, which OpenCode's `skill` tool lists. `condition.tools` (OpenCode's
tool names) becomes permission `deny` for every other known tool, which leaves it out of requests.
The thinking level becomes `--variant` (OpenCode's reasoning-effort variants; the model is declared
as reasoning). `harness_settings` (the keys of `SETTINGS_KEYS`) are merged into opencode.json under
the rig's own; a condition's `permission` rules come after the rig's `"*": "allow"` and before its
tool switches (later rules win). `harness_args` (`--agent`) go before `--`. Each extension is an
OpenCode plugin file (`.js` or `.ts`), copied to `opencode-config/plugins/`, which OpenCode loads
from every config dir; `--pure` (and OPENCODE_PURE) would skip every plugin but the built-in ones,
so a run with extensions goes without it: a workspace's `.opencode/plugins/` then loads too, and a
`plugin` list in the workspace's opencode.json would be installed from npm (the fixtures hold none).

Logs: stdout.log is the `--format json` event stream (step_start, tool_use, text, step_finish,
error). OpenCode keeps the session in a SQLite database (`$XDG_DATA_HOME/opencode/opencode.db`);
after the run its session, messages and parts are exported to `run_dir/session.json` (the shape of
`opencode export`), its log is copied to `run_dir/opencode.log` (one `stream error` line per failed
request) and the data dir is removed. `parse_session` reads those files and stdout.log only
(harnesses.opencode.session).
"""

import json
import shutil
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harnesses.cli_harness import CliHarness, install_extension, install_skill
from harnesses.factors import Factors, check_condition, merge
from harnesses.factors import mapping as factor_mapping
from harnesses.logs import as_str, fill_per_model
from harnesses.mock_model.openai_chat import OpenAIChat
from harnesses.mock_model.tools import ToolCall, ToolMap
from harnesses.opencode.session import (
    LOG_FILE,
    parse_files,
    pending_tool_part,
    read_transcript,
    signature,
    step_usage,
)
from rig.confine.run_budget import LiveUsage, tokens_of
from rig.schema import AgentRun, Condition, Metrics, ModelUsage, Transcript

BIN_ENV = "RIG_OPENCODE_BIN"
SESSION_FILE = "session.json"
HOME_DIR = "home"
XDG_DIR = "xdg"
CONFIG_DIR = "opencode-config"
APPENDED_PROMPT = "append-system-prompt.md"
MOCK_PROVIDER = "mock"
MOCK_MODEL = "mock-model"
MOCK_KEY_ENV = "RIG_MOCK_API_KEY"
# The base URLs of OpenCode 1.18.33's built-in providers (their AI SDK packages' defaults, as its
# binary holds them): the rig forwards to one from the key gateway OpenCode is pointed at instead.
OPENCODE_BASE_URLS = {
    "anthropic": "https://api.anthropic.com/v1",
    "google": "https://generativelanguage.googleapis.com/v1beta",
    "openai": "https://api.openai.com/v1",
    "openrouter": "https://openrouter.ai/api/v1",
}
SESSION_TITLE = "rig run"
# USD per million tokens: OpenCode multiplies usage by these to report a cost, as for a real model.
MOCK_COST = {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}
# harness_settings: the top-level keys of opencode.json that change the agent, not where it logs,
# which model or provider it reaches (`agent`, `mode` and `small_model` can name another model;
# `provider`, `enterprise`), what it fetches or runs from elsewhere (`plugin`, `mcp`, `lsp`,
# `formatter`, `skills`, `references`, `instructions` take URLs or packages) or its sharing and updates.
SETTINGS_KEYS = frozenset({"compaction", "tool_output", "permission", "default_agent"})
# harness_args: `opencode run`'s options that change neither logs, model, endpoint nor permissions
# (`--agent` picks one of its agents: build, plan, or one a `default_agent` names).
ARGS = {"--agent": 1}
PLUGINS_DIR = "plugins"
PLUGIN_SUFFIXES = (".js", ".ts")
DEFAULT_PROVIDER_TIMEOUT_MS = 30_000
# The reasoning-effort variants OpenCode 1.18.33 offers for an OpenAI-compatible reasoning model.
VARIANTS = ("low", "medium", "high")
# OpenCode 1.18.33's tools in a default `build` session (from a captured request).
KNOWN_TOOLS = frozenset(
    {"bash", "edit", "glob", "grep", "read", "skill", "task", "todowrite", "webfetch", "write"}
)
# The package OpenCode installs into every config dir at start-up (see `pin_plugin_dependency`).
PLUGIN_PACKAGE = "@opencode-ai/plugin"
# The environment switches that keep OpenCode off the network and away from the user's files.
OFFLINE_ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_PURE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
}
# The mock model's steps as OpenCode's built-in tools (it resolves a relative path in its directory).
MOCK_TOOLS = ToolMap(
    shell=lambda command, cwd: ToolCall("bash", {"command": command}),
    read=lambda path, cwd: ToolCall("read", {"filePath": path}),
    write=lambda path, content, cwd: ToolCall("write", {"filePath": path, "content": content}),
)


def stream_usage(event: dict[str, Any]) -> LiveUsage | None:
    """The usage of one model step as `--format json` streams it (`step_finish`, with OpenCode's
    cost): the live usage reader of rig.confine.run_budget."""
    part = event.get("part")
    if event.get("type") != "step_finish" or not isinstance(part, dict):
        return None
    tokens = part.get("tokens")
    usage = step_usage(tokens) if isinstance(tokens, dict) else ModelUsage()
    cost = part.get("cost")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        usage.cost_usd = float(cost)
    return LiveUsage(usage, key=as_str(part.get("id")))


def final_answer(event: dict[str, Any]) -> bool:
    """Whether a `--format json` event ends OpenCode's run: the `step_finish` of a step that
    stopped (its last; a step that calls a tool finishes with `tool-calls`)."""
    part = event.get("part")
    return event.get("type") == "step_finish" and isinstance(part, dict) and part.get("reason") == "stop"


def failed_step(event: dict[str, Any]) -> bool | None:
    """Whether a `--format json` event reports a failed model request (a `step_finish` with no
    finish reason and no usage: the stream ended before its end, which OpenCode retries without
    end), a response (any other `step_finish`), or neither (None)."""
    part = event.get("part")
    if event.get("type") != "step_finish" or not isinstance(part, dict):
        return None
    tokens = part.get("tokens")
    usage = step_usage(tokens) if isinstance(tokens, dict) else ModelUsage()
    return part.get("reason") == "unknown" and tokens_of(usage) == 0


class OpenCodeHarness(CliHarness):
    """A HarnessAdapter for OpenCode (`opencode run`), version-pinned in harnesses/node.

    `condition_mapping` says how skills, tools, thinking and the factors were realised.
    """

    name = "opencode"
    package = "opencode-ai"
    binary = "opencode"
    bin_env = BIN_ENV
    mock_protocol = OpenAIChat(MOCK_TOOLS)
    mock_key_env = MOCK_KEY_ENV
    mock_url_suffix = "/v1"
    # Its own retries of a dead or erroring provider, which no setting turns off (see above).
    provider_retries_s = 75.0
    factors = Factors(
        system_prompt=f"opencode.json instructions = [opencode-config/{APPENDED_PROMPT}]",
        settings_file=f"{CONFIG_DIR}/opencode.json",
        settings_keys=SETTINGS_KEYS,
        args=ARGS,
        extensions=f"as plugins copied to {CONFIG_DIR}/{PLUGINS_DIR}/ (without --pure)",
        thinking="--variant <level> (its reasoning-effort variants)",
    )
    live_usage = staticmethod(stream_usage)
    live_cost = True
    final_event = staticmethod(final_answer)
    failed_request = staticmethod(failed_step)
    usage_fields = frozenset({"input", "output", "cache_read", "reasoning"})
    # Its OpenAI-compatible provider reads `cached_tokens`, which holds the cache writes too.
    usage_folds = {"cache_write": "cache_read"}
    compaction_fields = frozenset({"compactions", "compaction_tokens_before", "compaction_tokens"})
    # It compacts once the last response fills the model's usable window (on by default); small
    # responses after, or it would compact after each.
    forced_compaction = {
        "harness_options": {
            "mock_usage": {"input": 120000, "output": 100, "cache_read": 0},
            "mock_later_usage": {"input": 1000, "output": 100, "cache_read": 500},
        }
    }
    # A plugin whose dispose() never returns: `opencode run` awaits it after its last step_finish
    # (the fault reported publicly: its final step, then a hang until the wall timeout).
    silent_after_final = {"extensions": [str(Path(__file__).with_name("hold_after_final.js"))]}
    lacks = {
        "cache_write": "its OpenAI-compatible provider counts cache writes as cache reads",
        "compaction_tokens_after": "OpenCode records no size of the context after a compaction",
        "retries_off": "OpenCode 1.18.33 retries a failed request 5 times and has no setting to stop it "
        "(2-30 s apart; at once after a retry-after-ms of 0)",
    }

    def default_base_url(self) -> str | None:
        """The base URL of OpenCode's built-in provider `provider.name` (its AI SDK's default)."""
        return OPENCODE_BASE_URLS.get(str(self.provider.name))

    def check_settings(self) -> None:
        """A real provider needs a name, a model and a key variable (OpenCode's model is `provider/model`)."""
        if self.provider.kind == "real" and not (
            self.provider.name and self.model and self.provider.api_key_env
        ):
            raise ValueError(
                "a real provider for opencode needs provider.name, a model and provider.api_key_env"
            )

    def variant(self, condition: Condition) -> str | None:
        """The `--variant` of a run: the condition's thinking level, else the experiment's."""
        level = self.thinking_level(condition)
        if level is not None and level not in VARIANTS:
            raise ValueError(
                f"thinking {level!r} is no reasoning variant opencode offers; use one of {VARIANTS}"
            )
        return level

    def command(
        self,
        workdir: Path,
        prompt: str,
        variant: str | None,
        args: Sequence[str] = (),
        plugins: bool = False,
    ) -> list[str]:
        """The `opencode run` command line for one run, with the condition's `args` (`--` then the
        prompt last); `--pure` unless it loads `plugins`."""
        command = [
            str(self.cli()),
            "run",
            "--format",
            "json",
            *([] if plugins else ["--pure"]),
            "--dir",
            str(workdir),
            "--title",
            SESSION_TITLE,
            "--model",
            f"{self._provider_id()}/{self._model_id()}",
        ]
        if variant is not None:
            command += ["--variant", variant]
        # `--` keeps a prompt that starts with "-" from being read as an option.
        return [*command, *args, "--", prompt]

    def config(
        self,
        base_url: str | None,
        tools: list[str] | None,
        timeout_ms: int,
        instructions: Path | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The content of opencode.json for a provider at `base_url` (see the module docstring), with
        `instructions`, a file whose text OpenCode adds to its system prompt, and the condition's
        `settings` merged under the rig's."""
        config: dict[str, Any] = {
            "$schema": "https://opencode.ai/config.json",
            "model": f"{self._provider_id()}/{self._model_id()}",
            "share": "disabled",
            "autoupdate": False,
            "snapshot": False,
            "lsp": False,
            "formatter": False,
            "provider": {self._provider_id(): self._provider_entry(base_url, timeout_ms)},
        }
        if instructions is not None:
            config["instructions"] = [str(instructions)]
        settings = settings or {}
        # The condition's settings first and the rig's over them: where both set a key, the rig's
        # value stays. Permissions are an ordered list whose later rules win, so they are built apart.
        config = merge(dict(settings), config)
        config["permission"] = permissions(settings.get("permission"), tools)
        return config

    def run(self, workdir: Path, prompt: str, condition: Condition, run_dir: Path, timeout: int) -> AgentRun:
        """Run OpenCode in `workdir`; streams, session export and OpenCode's dirs go to `run_dir`."""
        check_condition(self.name, self.factors, condition)
        variant = self.variant(condition)
        tool_switches(condition.tools)  # refuse a tool list OpenCode cannot realise before starting
        run_dir.mkdir(parents=True, exist_ok=True)
        home, xdg, config_dir = run_dir / HOME_DIR, run_dir / XDG_DIR, run_dir / CONFIG_DIR
        for folder in (home, xdg, config_dir):
            # A session left by an earlier run in the same folder must not be taken for this one's.
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
        skills = [install_skill(skill, config_dir / "skills") for skill in condition.skills]
        instructions = None
        if condition.append_system_prompt is not None:
            instructions = config_dir / APPENDED_PROMPT
            instructions.write_text(condition.append_system_prompt, encoding="utf-8")
        plugins = [install_plugin(e, config_dir / PLUGINS_DIR) for e in condition.extensions]
        parts = [
            mapping(skills, condition.tools, variant),
            *factor_mapping(self.factors, condition, [p.name for p in plugins]),
        ]
        self.condition_mapping = "; ".join(p for p in parts if p) or None
        extra = {
            "OPENCODE_CONFIG_DIR": str(config_dir),
            **{f"XDG_{kind.upper()}_HOME": str(xdg / kind) for kind in ("config", "data", "cache", "state")},
            **OFFLINE_ENV,
        }
        if plugins:
            del extra["OPENCODE_PURE"]
        if self.provider.kind == "mock":
            # The mock's provider and model are defined in full; a real built-in provider needs the catalogue.
            extra["OPENCODE_DISABLE_MODELS_FETCH"] = "1"
        env = self.environment(home, extra)
        timeout_ms = int(condition.harness_options.get("provider_timeout_ms", DEFAULT_PROVIDER_TIMEOUT_MS))
        data_dir = xdg / "data" / "opencode"
        data_dir.mkdir(parents=True)
        for folder in (config_dir, xdg / "config" / "opencode"):
            pin_plugin_dependency(folder)

        def connect(base_url: str | None) -> dict[str, str]:
            config = self.config(
                base_url, condition.tools, timeout_ms, instructions, condition.harness_settings
            )
            (config_dir / "opencode.json").write_text(json.dumps(config, indent=2) + "\n")
            return env

        command = self.command(workdir, prompt, variant, condition.harness_args, bool(plugins))
        run = self.run_process(command, workdir, condition, run_dir, timeout, data_dir, connect)
        session = save_session(data_dir, run_dir)
        shutil.rmtree(xdg / "data", ignore_errors=True)
        return run.model_copy(update={"session_path": session})

    def parse_session(self, run: AgentRun) -> Metrics:
        """Metrics from the exported session, OpenCode's log and the event stream alone."""
        return fill_per_model(parse_files(run.session_path, run.stdout_path))

    @staticmethod
    def transcript(run: AgentRun) -> Transcript:
        """The conversation of the exported session (else the event stream), see `read_transcript`."""
        return read_transcript(run.session_path, run.stdout_path)

    def infra_signature(self, run: AgentRun, metrics: Metrics) -> str | None:
        """The provider failure this run shows, if any.

        `opencode_provider_error`: the run's last model request failed (after OpenCode's retries)
        and nothing answered it. `opencode_truncated_stream`: a response ended without usage, i.e.
        its stream was cut before its end; OpenCode accepts it as complete (and runs its possibly
        partial tool call), so the run's tokens and behaviour cannot be trusted.
        """
        return signature(run.session_path, run.stdout_path)

    def tool_pending(self, run: AgentRun) -> bool:
        """Whether a tool part of the last assistant message was still pending or running.

        OpenCode stores a tool part when the model calls the tool and updates its state to
        `completed` or `error` when the tool returns; the event stream shows finished tools only,
        so it stands in only when there is no exported session.
        """
        return pending_tool_part(run.session_path, run.stdout_path)

    def _provider_id(self) -> str:
        return MOCK_PROVIDER if self.provider.kind == "mock" else str(self.provider.name)

    def _model_id(self) -> str:
        if self.provider.kind == "mock":
            return self.model or MOCK_MODEL
        return str(self.model)

    def _provider_entry(self, base_url: str | None, timeout_ms: int) -> dict[str, Any]:
        mock = self.provider.kind == "mock"
        key_env = MOCK_KEY_ENV if mock else str(self.provider.api_key_env)
        options: dict[str, Any] = {
            "apiKey": f"{{env:{key_env}}}",
            "headerTimeout": timeout_ms,
            "chunkTimeout": timeout_ms,
        }
        entry: dict[str, Any] = {"options": options}
        if base_url:
            options["baseURL"] = base_url
        # The mock and a provider the experiment gives a base_url are OpenAI-compatible; a built-in
        # provider keeps its own SDK and catalogue, reached at the key gateway's URL.
        compatible = mock or bool(self.provider.base_url)
        if compatible:
            entry |= {"npm": "@ai-sdk/openai-compatible", "name": self._provider_id()}
        model: dict[str, Any] = {"name": self._model_id(), "tool_call": True, "reasoning": True}
        if mock:
            model |= {"cost": MOCK_COST, "limit": {"context": 128000, "output": 16384}}
        if compatible:
            entry["models"] = {self._model_id(): model}
        return entry


def pin_plugin_dependency(folder: Path) -> None:
    """Make `folder` look as if OpenCode had installed its plugin package there already.

    OpenCode 1.18.33 (`Npm.install`) runs an npm install into each config dir whose `node_modules`
    is missing, or whose `package-lock.json` root lacks a dependency of its `package.json` or
    `@opencode-ai/plugin`; an empty `node_modules` and this lock satisfy it without a download.
    """
    (folder / "node_modules").mkdir(parents=True, exist_ok=True)
    lock = {"lockfileVersion": 3, "packages": {"": {"dependencies": {PLUGIN_PACKAGE: "*"}}}}
    (folder / "package-lock.json").write_text(json.dumps(lock, indent=2) + "\n")


def permissions(rules: Any, tools: list[str] | None) -> dict[str, Any]:
    """The `permission` of opencode.json: everything allowed, then the condition's `rules` (a
    table of them, or one action for all), then `deny` for each tool `tools` leaves out."""
    own = {"*": rules} if isinstance(rules, str) else dict(rules or {})
    return {"*": "allow", **own, **tool_switches(tools)}


def install_plugin(extension: str, root: Path) -> Path:
    """Copy a plugin file (`.js` or `.ts`) into `root`, OpenCode's plugin dir; the copy's path."""
    if not extension.endswith(PLUGIN_SUFFIXES):
        raise ValueError(
            f"extension {extension!r}: an OpenCode plugin is a {' or '.join(PLUGIN_SUFFIXES)} file"
        )
    return install_extension(extension, root)


def tool_switches(tools: list[str] | None) -> dict[str, str]:
    """The permissions that leave OpenCode with `tools` (None: its default set, no switches).

    A tool whose permission is `deny` is left out of the requests; OpenCode 1.18.33 ignores the
    older `tools: {name: false}` there (it still sends the tool).
    """
    if tools is None:
        return {}
    unknown = sorted(set(tools) - KNOWN_TOOLS)
    if unknown:
        raise ValueError(f"opencode has no tools {unknown}; its tools are {sorted(KNOWN_TOOLS)}")
    return {name: "deny" for name in sorted(KNOWN_TOOLS - set(tools))}


def mapping(skills: list[Path], tools: list[str] | None, variant: str | None) -> str | None:
    """What the record says about how skills, tools and thinking were realised; None when nothing was."""
    parts = []
    if skills:
        parts.append(f"skills copied to opencode-config/skills/ ({', '.join(s.name for s in skills)})")
    if tools is not None:
        off = sorted(tool_switches(tools))
        parts.append(f"tools: permission deny for {off}" if off else "tools: all of opencode's")
    if variant is not None:
        parts.append(f"thinking: --variant {variant} (reasoning_effort)")
    return "; ".join(parts) or None


def save_session(data_dir: Path, run_dir: Path) -> Path | None:
    """Export the session from OpenCode's database to `run_dir/session.json`; copy its log.

    The export has the shape of `opencode export`: `{"info": session, "messages": [{"info":
    message, "parts": [part, ...]}, ...]}`, each object its row's JSON `data` with its ids.
    None when no database or session exists (OpenCode failed before creating one).
    """
    logs = sorted((data_dir / "log").glob("*.log"))
    if logs:
        shutil.copyfile(logs[-1], run_dir / LOG_FILE)
    database = data_dir / "opencode.db"
    if not database.is_file():
        return _export_storage(data_dir / "storage", run_dir)
    connection = sqlite3.connect(database)
    try:
        connection.row_factory = sqlite3.Row
        session = connection.execute("SELECT * FROM session ORDER BY time_created DESC LIMIT 1").fetchone()
        if session is None:
            return None
        messages = []
        for row in connection.execute(
            "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id", (session["id"],)
        ):
            parts = [
                {"id": part["id"], "messageID": row["id"], **json.loads(part["data"])}
                for part in connection.execute(
                    "SELECT id, data FROM part WHERE message_id = ? ORDER BY time_created, id", (row["id"],)
                )
            ]
            messages.append({"info": {"id": row["id"], **json.loads(row["data"])}, "parts": parts})
        info = {key: session[key] for key in session.keys()}
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    target = run_dir / SESSION_FILE
    target.write_text(json.dumps({"info": info, "messages": messages}, indent=1) + "\n")
    return target


def _export_storage(storage: Path, run_dir: Path) -> Path | None:
    """The export of a session OpenCode before its SQLite database (1.0) kept as JSON files:
    `storage/session/<project>/<session>.json`, `storage/message/<session>/<message>.json` and
    `storage/part/<message>/<part>.json`; None when there is no session."""

    def load(path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    sessions = [load(p) for p in storage.glob("session/*/*.json")]
    if not sessions:
        return None
    info = max(sessions, key=lambda s: (s.get("time") or {}).get("created") or 0)
    rows = [load(p) for p in (storage / "message" / str(info.get("id"))).glob("*.json")]
    rows.sort(key=lambda m: ((m.get("time") or {}).get("created") or 0, str(m.get("id"))))
    messages = [
        {
            "info": row,
            "parts": [load(p) for p in sorted((storage / "part" / str(row.get("id"))).glob("*.json"))],
        }
        for row in rows
    ]
    target = run_dir / SESSION_FILE
    target.write_text(json.dumps({"info": info, "messages": messages}, indent=1) + "\n")
    return target

"""Condition factors beyond the workspace (append_system_prompt, harness_settings, harness_args,
extensions): refused at config load where a harness has no equivalent, and realised by the real
CLIs against the mock model, whose ledger says whether the appended text reached it."""

import json
from pathlib import Path

import pytest

from harnesses.factors import check_args, merge
from harnesses.gemini.adapter import install_manifest
from harnesses.mock_model.policy import ContextSensitivePolicy, Policy, Step
from harnesses.mock_model.server import MockModelServer
from harnesses.mock_model.session import LEDGER_FILE, agents_md_marker
from harnesses.opencode.adapter import install_plugin, permissions
from harnesses.registry import adapter_class, calibrated_names
from rig.experiment.load import ExperimentError, load_experiment
from rig.paths import REPO_ROOT
from rig.schema import AgentRun, Condition, Provider, Task

STALL_S = 30.0
TIMEOUT_S = 120
SYSTEM_PROMPT_CONFIGS = {
    "pi": REPO_ROOT / "experiments" / "pi_system_prompt.toml",
    "claude-code": REPO_ROOT / "experiments" / "claude_code_system_prompt.toml",
}
# Every real CLI that declares a way to append to its system prompt (the capability table).
ADAPTERS = {
    name: adapter_class(name) for name in calibrated_names() if adapter_class(name).factors.system_prompt
}
# A real provider needs a model for Pi and Codex (Codex builds its tool set from a known slug).
MODELS = {"pi": "local-model", "codex": "gpt-5.5", "opencode": "local-model"}
BLOCKED = "blocked by the rig's test extension"
PI_EXTENSION = f"""export default function (pi: any) {{
  pi.on("tool_call", async (event: any) => {{
    if (event.toolName === "bash") return {{ block: true, reason: "{BLOCKED}" }};
  }});
}}
"""
HOOK_LOG = "hook-calls.log"
OPENCODE_PLUGIN = f"""export const BlockBash = async () => ({{
  "tool.execute.before": async (input) => {{
    if (input.tool === "bash") throw new Error("{BLOCKED}");
  }},
}});
"""


def config(tmp_path: Path, harness: str, condition: str) -> Path:
    """An experiment config in tmp_path with one condition, given as the TOML lines of its table."""
    path = tmp_path / "exp.toml"
    path.write_text(f'harness = "{harness}"\n\n[[conditions]]\nname = "arm"\n{condition}\n')
    return path


# --- refused at config load, in one line -----------------------------------------------------------


@pytest.mark.parametrize(
    ("harness", "condition", "message"),
    [
        (
            "gemini",
            'append_system_prompt = "Be brief."',
            "harness 'gemini' has no way to append to its system prompt (Gemini CLI can only replace its "
            "whole system prompt (GEMINI_SYSTEM_MD), not append to it, and writes its default prompt "
            "(GEMINI_WRITE_SYSTEM_MD) only once a run builds its first request",
        ),
        (
            "opencode",
            "harness_settings = { provider = { x = {} } }",
            "'opencode' does not take 'provider' in its opencode-config/opencode.json; use compaction, "
            "default_agent, permission, tool_output",
        ),
        ("opencode", 'harness_settings = { agent = { build = { model = "x/y" } } }', "not take 'agent'"),
        (
            "opencode",
            'harness_args = ["--auto"]',
            "'opencode' does not allow '--auto'; allowed options: --agent",
        ),
        ("opencode", 'harness_args = ["--agent"]', "--agent needs a value"),
        ("gemini", "harness_settings = { security = { auth = {} } }", "'gemini' does not take 'security'"),
        ("gemini", "harness_settings = { modelConfigs = { aliases = {} } }", "not take 'modelConfigs'"),
        ("gemini", 'harness_args = ["--yolo"]', "'gemini' does not allow '--yolo'"),
        ("gemini", 'harness_args = ["--include-directories=/"]', "does not allow '--include-directories=/'"),
        ("gemini", 'extensions = ["no/such/gemini-extension.json"]', "is no file"),
        (
            "pi",
            "harness_settings = { retry = { enabled = true } }",
            "'pi' does not take 'retry' in its agent/settings.json",
        ),
        ("pi", 'harness_args = ["--session-dir", "/tmp/x"]', "'pi' does not allow '--session-dir'"),
        ("claude-code", 'harness_args = ["--settings={}"]', "'claude-code' does not allow '--settings={}'"),
        ("claude-code", 'harness_args = ["--autocompact"]', "--autocompact needs a value"),
        (
            "codex",
            'harness_args = ["-c", "model_provider=x"]',
            "harness 'codex' takes no command-line options (its options are config.toml keys, which "
            "harness_settings set); remove them",
        ),
        (
            "codex",
            'extensions = ["README.md"]',
            "harness 'codex' loads no extensions (Codex has no extension",
        ),
        (
            "scripted",
            'thinking = "high"',
            "harness 'scripted' has no thinking level to set (the scripted agent",
        ),
        ("pi", 'extensions = ["no/such/extension.ts"]', "'no/such/extension.ts' is no file"),
        ("pi", 'append_system_prompt = { file = "missing.md" }', "missing.md (No such file or directory)"),
        ("pi", 'append_system_prompt = "  "', "append_system_prompt: is empty"),
        ("scripted", 'append_system_prompt = "Be brief."', "harness 'scripted' has no way to append"),
    ],
)
def test_a_factor_the_harness_lacks_is_refused_at_load(tmp_path, harness, condition, message):
    with pytest.raises(ExperimentError) as caught:
        load_experiment(config(tmp_path, harness, condition))
    text = str(caught.value)
    assert message in text and "\n" not in text
    assert text.startswith(str(tmp_path / "exp.toml"))


def test_an_appended_prompt_file_is_read_relative_to_the_config(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "house.md").write_text("Always run the gate.\n")
    experiment = load_experiment(config(tmp_path, "pi", 'append_system_prompt = { file = "rules/house.md" }'))
    assert experiment.conditions[0].append_system_prompt == "Always run the gate.\n"


@pytest.mark.parametrize("harness", sorted(SYSTEM_PROMPT_CONFIGS))
def test_the_system_prompt_study_appends_the_rules_agents_md_holds(harness):
    experiment = load_experiment(SYSTEM_PROMPT_CONFIGS[harness])
    arms = {c.name: c for c in experiment.conditions}
    assert experiment.harness == harness and set(arms) == {"agents_md", "system_prompt"}
    assert arms["agents_md"].append_system_prompt is None and not arms["agents_md"].remove_files
    assert arms["system_prompt"].remove_files == ["AGENTS.md"]
    agents_md = (REPO_ROOT / "fixtures" / "taskapp" / "AGENTS.md").read_text()
    assert arms["system_prompt"].append_system_prompt == agents_md


def test_args_take_values_as_declared():
    allowed = {"--autocompact": 1, "--bare": 0}
    check_args("h", allowed, ["--autocompact=5000", "--bare", "--autocompact", "6000"])
    with pytest.raises(ValueError, match="--bare takes no value"):
        check_args("h", allowed, ["--bare=yes"])
    with pytest.raises(ValueError, match="does not allow '5000'"):
        check_args("h", allowed, ["--bare", "5000"])


def test_settings_merge_table_by_table():
    base = {"retry": {"enabled": False, "provider": {"maxRetries": 0}}, "keep": 1}
    fragment = {"retry": {"provider": {"timeoutMs": 5}}, "compaction": {"enabled": True}}
    assert merge(base, fragment) == {
        "retry": {"enabled": False, "provider": {"maxRetries": 0, "timeoutMs": 5}},
        "keep": 1,
        "compaction": {"enabled": True},
    }
    assert base == {"retry": {"enabled": False, "provider": {"maxRetries": 0}}, "keep": 1}


def test_codex_takes_the_prompt_and_settings_in_its_config(task):
    condition = Condition(
        name="arm",
        append_system_prompt="Always run the gate.",
        harness_settings={"model_auto_compact_token_limit": 50_000},
    )
    codex = adapter_class("codex")(task, Provider(), None, None, STALL_S)
    written = codex.config("http://127.0.0.1:1/v1", None, condition)
    assert written["developer_instructions"] == "Always run the gate."
    assert written["model_auto_compact_token_limit"] == 50_000
    # The rig's own settings stay: the provider, and no outside hosts.
    assert written["model_provider"] == "mock" and written["analytics"] == {"enabled": False}


# --- the real CLIs against the mock model ------------------------------------------------------------


def run_arm(harness: str, task: Task, workspace: Path, run_dir: Path, condition: Condition) -> tuple:
    """Run `harness` on `condition` against the mock model it starts itself; the ledger it saved."""
    adapter = adapter_class(harness)(task, Provider(), None, None, STALL_S)
    run: AgentRun = adapter.run(workspace, task.spec.prompt, condition, run_dir, TIMEOUT_S)
    return adapter, run, json.loads((run_dir / LEDGER_FILE).read_text())


def sensitive(marker: str, prompt: str) -> ContextSensitivePolicy:
    """A mock that answers "followed" when `marker` reached it and "strayed" otherwise, at once; the
    first request that carries `prompt` decides (a harness's side requests carry no context)."""
    return ContextSensitivePolicy(
        name="rules_sensitive",
        follow=Policy("followed", (Step("final", text="followed"),)),
        stray=Policy("strayed", (Step("final", text="strayed"),)),
        p_with=1.0,
        p_without=0.0,
        seed_key="system-prompt",
        marker=marker,
        prompt=prompt,
    )


def run_against(
    server: MockModelServer, harness: str, task: Task, workspace: Path, run_dir: Path, arm: Condition
):
    """Run `harness` on `arm` through its real-provider path, pointed at `server`."""
    cls = ADAPTERS[harness]
    url = f"{server.base_url}{cls.mock_url_suffix}"
    provider = Provider(kind="real", name="rig-local", base_url=url, api_key_env="RIG_TEST_FACTORS_KEY")
    adapter = cls(task, provider, MODELS.get(harness), None, STALL_S)
    return adapter, adapter.run(workspace, task.spec.prompt, arm, run_dir, TIMEOUT_S)


@pytest.mark.slow
@pytest.mark.parametrize("harness", sorted(ADAPTERS))
def test_the_appended_rules_reach_the_model_without_agents_md(
    harness, task, workspace, tmp_path, monkeypatch
):
    monkeypatch.setenv("RIG_TEST_FACTORS_KEY", "test-key")
    # Codex and OpenCode have no shipped config for the study: they run Pi's arm, which names no harness.
    config = SYSTEM_PROMPT_CONFIGS.get(harness, SYSTEM_PROMPT_CONFIGS["pi"])
    arm = {c.name: c for c in load_experiment(config).conditions}["system_prompt"]
    for removed in arm.remove_files:
        (workspace / removed).unlink()
    marker = agents_md_marker(task.pack.fixture_dir)
    protocol = ADAPTERS[harness].mock_protocol

    with MockModelServer(sensitive(marker, task.spec.prompt), protocols=[protocol]) as server:
        adapter, run = run_against(server, harness, task, workspace, tmp_path / "with", arm)
    assert run.exit_code == 0
    assert server.resolution is not None and server.resolution["context_seen"] is True
    # The workspace holds no context file: the text came through the system prompt only.
    assert not {"AGENTS.md", "CLAUDE.md"} & {p.name for p in workspace.rglob("*")}
    assert marker not in " ".join(run.command), "the text goes in a file, not on the command line"
    chars = len(arm.append_system_prompt or "")
    assert f"append_system_prompt ({chars} chars)" in (adapter.condition_mapping or "")

    # The same arm without the appended text: nothing carries the rules to the model.
    bare = arm.model_copy(update={"append_system_prompt": None})
    with MockModelServer(sensitive(marker, task.spec.prompt), protocols=[protocol]) as control:
        run_against(control, harness, task, workspace, tmp_path / "without", bare)
    assert control.resolution is not None and control.resolution["context_seen"] is False


@pytest.mark.slow
def test_pi_settings_args_and_extension_reach_its_private_config(task, workspace, tmp_path):
    extension = tmp_path / "block_bash.ts"
    extension.write_text(PI_EXTENSION)
    condition = Condition(
        name="arm",
        harness_settings={"compaction": {"enabled": True, "reserveTokens": 2048, "keepRecentTokens": 1000}},
        harness_args=["--no-context-files"],
        extensions=[str(extension)],
        harness_options={"mock_policy": "commands", "commands": ["echo reached"]},
    )
    run_dir = tmp_path / "run"
    adapter, run, ledger = run_arm("pi", task, workspace, run_dir, condition)

    settings = json.loads((run_dir / "agent" / "settings.json").read_text())
    assert settings["compaction"] == {"enabled": True, "reserveTokens": 2048, "keepRecentTokens": 1000}
    assert settings["retry"]["enabled"] is False, "the rig's own settings stay"
    assert run.command[-2] == "--no-context-files"
    copy = run_dir / "agent" / "extensions" / "block_bash.ts"
    assert run.command[run.command.index("--extension") + 1] == str(copy)
    assert not (workspace / "block_bash.ts").exists() and not (workspace / ".pi").exists()
    # The extension ran: it blocked the mock's shell command.
    results = (
        [json.loads(line) for line in run.session_path.read_text().splitlines()] if run.session_path else []
    )
    (bash,) = [e["message"] for e in results if e.get("message", {}).get("toolName") == "bash"]
    assert bash["isError"] and bash["content"] == [{"type": "text", "text": BLOCKED}]
    assert adapter.condition_mapping == (
        "harness_settings merged into agent/settings.json: compaction; harness_args: --no-context-files; "
        "extensions copied to agent/extensions/, loaded with --extension: block_bash.ts"
    )
    assert ledger["policy"] == "commands"


@pytest.mark.slow
def test_claude_code_settings_args_and_hook_reach_its_private_config(task, workspace, tmp_path):
    hook = tmp_path / "log_tool.sh"
    hook.write_text(f'#!/bin/sh\necho called >> "$(dirname "$0")/{HOOK_LOG}"\n')
    condition = Condition(
        name="arm",
        harness_settings={"autoCompactEnabled": False},
        harness_args=["--exclude-dynamic-system-prompt-sections", "--autocompact=200000"],
        extensions=[str(hook)],
        harness_options={"mock_policy": "commands", "commands": ["echo reached"]},
    )
    run_dir = tmp_path / "run"
    adapter, run, _ = run_arm("claude-code", task, workspace, run_dir, condition)

    config = run_dir / "config"
    settings = json.loads((config / "settings.json").read_text())
    copy = config / "hooks" / "log_tool.sh"
    assert settings == {
        "autoCompactEnabled": False,
        "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": str(copy)}]}]},
    }
    prompt_at = run.command.index("--")
    assert run.command[prompt_at - 2 : prompt_at] == [
        "--exclude-dynamic-system-prompt-sections",
        "--autocompact=200000",
    ]
    # The hook ran before each tool call: the mock's policy reads the README, then runs its command.
    assert (config / "hooks" / HOOK_LOG).read_text().splitlines() == ["called", "called"]
    assert "harness_args: --exclude-dynamic-system-prompt-sections --autocompact=200000" in (
        adapter.condition_mapping or ""
    )
    assert not (workspace / ".claude").exists()


@pytest.mark.slow
def test_gemini_settings_args_and_extensions_reach_its_private_home(task, workspace, tmp_path):
    manifests = {"rig-kept": "grep_search", "rig-left": "list_directory"}
    for name, excluded in manifests.items():
        manifest = {"name": name, "version": "1.0.0", "excludeTools": [excluded]}
        (tmp_path / f"{name}.json").write_text(json.dumps(manifest))
    condition = Condition(
        name="arm",
        # The rig's own settings win where both set one: the sandbox stays off.
        harness_settings={"tools": {"exclude": ["glob"], "sandbox": True}},
        harness_args=["--extensions=rig-kept"],
        extensions=[str(tmp_path / f"{name}.json") for name in manifests],
        harness_options={"mock_policy": "commands", "commands": ["echo reached"]},
    )
    run_dir = tmp_path / "run"
    adapter, run, ledger = run_arm("gemini", task, workspace, run_dir, condition)

    assert run.exit_code == 0 and ledger["policy"] == "commands"
    gemini_dir = run_dir / "home" / ".gemini"
    settings = json.loads((gemini_dir / "settings.json").read_text())
    assert settings["tools"]["exclude"] == ["glob"] and settings["tools"]["sandbox"] is False
    for name in manifests:
        assert (
            json.loads((gemini_dir / "extensions" / name / "gemini-extension.json").read_text())["name"]
            == name
        )
    assert run.command[-1] == "--extensions=rig-kept"
    # Every request offers the tools that are left: glob excluded by the settings, grep_search by
    # the extension --extensions keeps active; the other extension's exclusion does not apply.
    offered = {tool for entry in ledger["ledger"] for tool in entry["tools"] or ()}
    assert {"read_file", "run_shell_command", "list_directory"} <= offered
    assert not {"glob", "grep_search"} & offered
    assert (adapter.condition_mapping or "").endswith(
        "harness_settings merged into $HOME/.gemini/settings.json: tools; "
        "harness_args: --extensions=rig-kept; "
        "extensions as gemini-extension.json manifests in $HOME/.gemini/extensions/<name>/: "
        "rig-kept, rig-left"
    )
    assert not (workspace / ".gemini").exists()


@pytest.mark.slow
def test_opencode_settings_args_and_plugin_reach_its_private_config(task, workspace, tmp_path):
    plugin = tmp_path / "block_bash.js"
    plugin.write_text(OPENCODE_PLUGIN)
    condition = Condition(
        name="arm",
        # `--agent build` overrides the `default_agent` the settings name.
        harness_settings={"permission": {"grep": "deny"}, "default_agent": "plan"},
        harness_args=["--agent", "build"],
        extensions=[str(plugin)],
        harness_options={"mock_policy": "commands", "commands": ["echo reached"]},
    )
    run_dir = tmp_path / "run"
    adapter, run, ledger = run_arm("opencode", task, workspace, run_dir, condition)

    assert run.exit_code == 0 and ledger["policy"] == "commands"
    config = json.loads((run_dir / "opencode-config" / "opencode.json").read_text())
    assert config["permission"] == {"*": "allow", "grep": "deny"} and config["default_agent"] == "plan"
    assert config["provider"].keys() == {"mock"}, "the rig's own settings stay"
    copy = run_dir / "opencode-config" / "plugins" / "block_bash.js"
    assert copy.is_file() and "--pure" not in run.command
    assert run.command[run.command.index("--") - 2 :] == ["--agent", "build", "--", task.spec.prompt]
    offered = {tool for entry in ledger["ledger"] for tool in entry["tools"] or ()}
    assert "bash" in offered and "grep" not in offered
    export = json.loads(run.session_path.read_text()) if run.session_path else {"messages": []}
    assert {m["info"].get("agent") for m in export["messages"]} == {"build"}
    # The plugin ran: it failed the mock's shell command before it ran.
    (bash,) = [p["state"] for m in export["messages"] for p in m["parts"] if p.get("tool") == "bash"]
    assert bash["status"] == "error" and BLOCKED in bash["error"]
    assert (adapter.condition_mapping or "").endswith(
        "harness_settings merged into opencode-config/opencode.json: default_agent, permission; "
        "harness_args: --agent build; "
        "extensions as plugins copied to opencode-config/plugins/ (without --pure): block_bash.js"
    )


def test_an_extension_that_is_no_manifest_or_plugin_is_refused_before_a_run(tmp_path):
    (tmp_path / "notes.md").write_text("# notes\n")
    (tmp_path / "nameless.json").write_text('{"version": "1.0.0"}')
    with pytest.raises(ValueError, match="is no gemini-extension.json"):
        install_manifest(str(tmp_path / "notes.md"), tmp_path / "extensions")
    with pytest.raises(ValueError, match="needs a `name`"):
        install_manifest(str(tmp_path / "nameless.json"), tmp_path / "extensions")
    with pytest.raises(ValueError, match="an OpenCode plugin is a .js or .ts file"):
        install_plugin(str(tmp_path / "notes.md"), tmp_path / "plugins")
    assert not (tmp_path / "extensions").exists() and not (tmp_path / "plugins").exists()


def test_opencode_permissions_keep_the_rig_default_first_and_its_tool_switches_last():
    assert permissions({"bash": {"rm *": "deny"}, "edit": "allow"}, ["bash", "read"])["edit"] == "deny"
    assert list(permissions({"bash": {"rm *": "deny"}}, None)) == ["*", "bash"]
    assert permissions("deny", None) == {"*": "deny"}

"""The scripted harness: a deterministic agent CLI for testing the run pipeline end to end.

The agent (`harnesses/scripted/agent.py`) runs as a real subprocess in the workspace, under the
same process runner, environment rules and watchdogs as a real harness, and writes a Pi-like
session. Its behaviour is chosen by `condition.harness_options["policy"]`:

- `solution` (default) / `decoy` (with `harness_options["decoy"]`): read the docs, apply the
  task's reference or named decoy patch, run the pack's gate as its docs spell it;
- `tamper`: rig the gate instead of fixing anything, as `tamper_plan` says for the task's pack;
- `nothing`, `sleep` (`harness_options["seconds"]`), `hang`, `stall`, `crash`, `write_outside`,
  `flood` (`stdout_bytes`, `stderr_bytes` of filler), `answer_then_hang` (the solution and its
  final answer, then alive and silent): behaviours the pipeline must classify or contain;
- `infra_no_turn`, `infra_error_only`, `flaky` (infra failure on attempt 1 only): provider failures;
- `bernoulli` (`harness_options["p"]`): the solution with probability p, else nothing, seeded per run;
- `script` (`harness_options["commands"]`, a list of shell commands): read the README, run each
  command as one bash turn, answer "Done." (the adversarial suite, tests/test_redteam.py).

The attempt number comes from the run directory's name (`attempt-<n>`). The agent is handed no
path inside the rig's repository but its own script (which the sandbox exposes): the patch a
policy applies, the commands of `script` and the steps of `tamper` are copied into the run
directory first. The agent knows no pack: what the gate is and what to tamper with come from here.
"""

import json
import re
import shlex
import shutil
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from harnesses.capabilities import COMPACTION_FIELDS, USAGE_FIELDS
from harnesses.cli_harness import round_cost
from harnesses.logs import (
    ToolLog,
    derive_behaviour,
    fill_per_model,
    fold_pi_message,
    pi_live_usage,
    pi_transcript,
    read_jsonl,
    unreadable_lines,
)
from harnesses.protocol import HarnessBase
from rig.confine.agent import Confinement, run_agent_process
from rig.confine.proc import BASE_PATH
from rig.runners.registry import kind_of
from rig.schema import (
    DEFAULT_STALL_S,
    AgentRun,
    Condition,
    Metrics,
    Pack,
    Provider,
    Task,
    Transcript,
)
from rig.version import rig_version

AGENT_SCRIPT = Path(__file__).resolve().with_name("agent.py")
DEFAULT_POLICY = "solution"
DEFAULT_MODEL = "scripted-model"
SESSION_NAME = "session.jsonl"
# Inputs copied into the run directory (the attempt folder), so they are saved with the run.
PATCH_COPY = "scripted-input.patch"
SCRIPT_COPY = "scripted-input.json"
TAMPER_COPY = "scripted-tamper.json"
INFRA_SIGNATURE = "scripted_provider_error"
# The session event of a provider failure that left no assistant message (what Pi does in json mode).
PROVIDER_ERROR = "provider_error"
COST_SOURCE = "harness"
_ATTEMPT_DIR = re.compile(r"^attempt-(\d+)$")

# What the tamper policy writes: files that make a gate or a test run pass whatever the code does.
FAKE_JSON_REPORT = '{"ok": true, "failed": [], "results": {}}'
FAKE_GATE_JS = f"console.log({FAKE_JSON_REPORT!r});\nprocess.exit(0);\n"
FAKE_GATES = {
    ".py": f"import sys\n\nprint({FAKE_JSON_REPORT!r})\nsys.exit(0)\n",
    ".js": FAKE_GATE_JS,
    ".mjs": FAKE_GATE_JS,
    ".cjs": FAKE_GATE_JS,
}
# A gate script in any other language is replaced by a shell script.
FAKE_GATE_SH = f"#!/bin/sh\necho '{FAKE_JSON_REPORT}'\nexit 0\n"
_SKIP_PARTS = frozenset({".git", "__pycache__", "node_modules"})


def final_answer(event: dict[str, Any]) -> bool:
    """Whether an event of the scripted agent's stream is its closing answer (stop reason `stop`)."""
    message = event.get("message")
    return (
        event.get("type") == "message"
        and isinstance(message, dict)
        and message.get("role") == "assistant"
        and message.get("stopReason") == "stop"
    )


class ScriptedHarness(HarnessBase):
    """A HarnessAdapter whose agent follows a fixed script instead of a model."""

    name = "scripted"
    # Its events imitate Pi's, with Pi's usage and cost in each assistant message.
    live_usage = staticmethod(pi_live_usage)
    live_cost = True
    final_event = staticmethod(final_answer)
    lacks = dict.fromkeys(
        (
            "thinking",
            "append_system_prompt",
            "harness_settings",
            "harness_args",
            "extensions",
            *USAGE_FIELDS,
            *COMPACTION_FIELDS,
            "mock",
            "retries_off",
            "harness_version",
        ),
        "the scripted agent follows a fixed script: it has no CLI and calls no model",
    ) | {
        "silent_after_final": "it has no CLI to hold open; its answer_then_hang policy plays the fault "
        "(tests/test_after_final.py)"
    }

    def __init__(
        self,
        task: Task,
        stall_s: float = DEFAULT_STALL_S,
        python: str = sys.executable,
        confinement: Confinement | None = None,
        *,
        provider: Provider | None = None,
        model: str | None = None,
        thinking: str | None = None,
    ) -> None:
        # provider, model and thinking: the registry passes them to every adapter; a scripted agent
        # has no model.
        self.task = task
        self.stall_s = stall_s
        self.confinement = confinement
        self.python = python

    def version(self) -> str:
        """The scripted agent has no release of its own: it is versioned with the rig."""
        return f"scripted-{rig_version()}"

    def run(self, workdir: Path, prompt: str, condition: Condition, run_dir: Path, timeout: int) -> AgentRun:
        """Run the scripted agent in `workdir`; its session and streams go to `run_dir`."""
        options = condition.harness_options
        policy = str(options.get("policy", DEFAULT_POLICY))
        session_path = run_dir / SESSION_NAME
        command = [
            self.python,
            str(AGENT_SCRIPT),
            "--policy",
            policy,
            "--session",
            str(session_path),
            "--attempt",
            str(attempt_number(run_dir)),
            "--model",
            str(options.get("model", DEFAULT_MODEL)),
            "--prompt",
            prompt,
            "--gate",
            shlex.join(self.task.pack.spec.gate.command),
        ]
        if condition.thinking is not None:
            command += ["--thinking", condition.thinking]
        run_dir.mkdir(parents=True, exist_ok=True)
        patch = self._patch(policy, options)
        if patch is not None:
            # A copy in the run directory: the repository (tasks/) is not the agent's to see.
            copy = run_dir / PATCH_COPY
            shutil.copyfile(patch, copy)
            command += ["--patch", str(copy.resolve())]
        if policy == "script":
            script = run_dir / SCRIPT_COPY
            script.write_text(json.dumps({"commands": script_commands(options)}, indent=2) + "\n")
            command += ["--script", str(script.resolve())]
        if policy == "tamper":
            steps = run_dir / TAMPER_COPY
            steps.write_text(json.dumps({"steps": tamper_plan(self.task.pack)}, indent=2) + "\n")
            command += ["--tamper", str(steps.resolve())]
        if policy == "sleep":
            command += ["--seconds", str(options.get("seconds", 0))]
        if policy == "flood":
            command += ["--stdout-bytes", str(int(options.get("stdout_bytes", 0)))]
            command += ["--stderr-bytes", str(int(options.get("stderr_bytes", 0)))]
        if policy == "bernoulli":
            # Seeded by run id and attempt: the same run always makes the same choice.
            seed_key = f"{run_dir.parent.name}/{run_dir.name}"
            command += ["--success-rate", str(float(options.get("p", 0.5))), "--seed-key", seed_key]
        home = run_dir / "home"
        home.mkdir(parents=True, exist_ok=True)
        return run_agent_process(
            command,
            workdir,
            self._env(home),
            run_dir,
            timeout,
            self.stall_s,
            session_path,
            self.confinement,
            usage=pi_live_usage,
            final_event=type(self).final_event,
        )

    def parse_session(self, run: AgentRun) -> Metrics:
        """Metrics from the saved session alone; a missing or empty session gives zero metrics."""
        return fill_per_model(parse_session_file(run.session_path))

    @staticmethod
    def transcript(run: AgentRun) -> Transcript:
        """The saved session's steps: the prompt, then each message and provider error in order."""
        events = read_jsonl(run.session_path)
        header = next((e for e in events if e.get("type") == "session"), {})
        messages = [
            e["message"]
            if e.get("type") == "message"
            else {"role": "error", "content": str(e.get("message", ""))}
            for e in events
            if (e.get("type") == "message" and isinstance(e.get("message"), dict))
            or e.get("type") == PROVIDER_ERROR
        ]
        transcript = pi_transcript("scripted", messages, header)
        transcript.gaps += unreadable_lines(run.session_path)
        if not events:
            transcript.gaps.append("no session was saved")
        return transcript

    def infra_signature(self, run: AgentRun, metrics: Metrics) -> str | None:
        """`scripted_provider_error` when the session holds a provider_error event.

        Errored assistant messages count as transport failures too (as in Pi) but are no
        signature: a run of them only is the shared `only_error_responses` rule's to judge.
        """
        provider_error = any(e.get("type") == PROVIDER_ERROR for e in read_jsonl(run.session_path))
        return INFRA_SIGNATURE if provider_error else None

    def tool_pending(self, run: AgentRun) -> bool:
        """Whether the last assistant message's tool calls had not all got a toolResult message.

        The agent writes the message calling a tool before it runs it, and the result after.
        """
        tools = ToolLog()
        for event in read_jsonl(run.session_path):
            if event.get("type") == "message" and isinstance(event.get("message"), dict):
                fold_pi_message(Metrics(), event["message"], tools)
        return tools.pending

    def _patch(self, policy: str, options: dict[str, Any]) -> Path | None:
        if policy == "decoy":
            name = options.get("decoy")
            if not name:
                raise ValueError("policy 'decoy' needs harness_options['decoy'], the decoy's name")
            patch = self.task.decoy_patch(str(name))
            if not patch.is_file():
                raise ValueError(f"task {self.task.id} has no decoy {name!r} ({patch} is missing)")
            return patch
        if policy in ("solution", "flaky", "bernoulli", "answer_then_hang"):
            return self.task.solution_patch
        return None

    def _env(self, home: Path) -> dict[str, str]:
        # Built from nothing: an inherited variable (CI, PYTHONPATH, API keys) could change what
        # the agent does without appearing in any record.
        return {
            "PATH": f"{Path(self.python).parent}:{BASE_PATH}",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }


def script_commands(options: dict[str, Any]) -> list[str]:
    """`harness_options["commands"]` of the script policy: a non-empty list of shell commands."""
    commands = options.get("commands")
    if not isinstance(commands, list) or not commands or not all(isinstance(c, str) for c in commands):
        raise ValueError("policy 'script' needs harness_options['commands'], a non-empty list of strings")
    return list(commands)


def tamper_plan(pack: Pack) -> list[dict[str, str]]:
    """The steps of the tamper policy on a workspace of `pack`, each `{"write": path, "content":
    text}` or `{"delete": path}`: plant the files that change how the runner kind's tests start,
    overwrite each gate script with one that passes, delete the visible test file whose name sorts
    first in the first protected folder that holds any, and put a fake test beside it. Every step
    touches a protected path: the pipeline must record and undo each one.
    """
    kind = kind_of(pack.spec.runner.kind)
    steps = [{"write": path, "content": content} for path, content in kind.tamper_files.items()]
    for script in pack.spec.gate.scripts:
        fake = FAKE_GATES.get(PurePosixPath(script).suffix, FAKE_GATE_SH)
        steps.append({"write": script, "content": fake})
    victim = _first_test_file(pack)
    if victim is not None:
        name, content = kind.passing_test
        steps.append({"delete": victim})
        steps.append({"write": str(PurePosixPath(victim).with_name(name)), "content": content})
    return steps


def _first_test_file(pack: Pack) -> str | None:
    """The test file of the fixture (one the project's runner runs unasked: the pack's test_files,
    else the runner kind's defaults) whose name sorts first, in the first of the pack's protected
    folders that holds one; None if none does."""
    kind, test_files = kind_of(pack.spec.runner.kind), pack.spec.runner.test_files
    for folder in pack.spec.protect.dirs:
        found = []
        for path in (pack.fixture_dir / folder).rglob("*"):
            relative = PurePosixPath(path.relative_to(pack.fixture_dir).as_posix())
            if (
                path.is_file()
                and not _SKIP_PARTS & set(relative.parts)
                and kind.runs_unasked(relative, test_files)
            ):
                found.append(relative)
        if found:
            return str(min(found, key=lambda p: (p.name, p.as_posix())))
    return None


def attempt_number(run_dir: Path) -> int:
    """The attempt encoded in a run directory named `attempt-<n>`; 1 for any other name."""
    match = _ATTEMPT_DIR.match(run_dir.name)
    return int(match.group(1)) if match else 1


def parse_session_file(path: Path | None) -> Metrics:
    """Metrics of a scripted session file (see harnesses/scripted/agent.py for its format)."""
    events = read_jsonl(path)
    metrics = Metrics()
    cwd: str | None = None
    costs: list[float] = []
    tools = ToolLog()
    for event in events:
        kind = event.get("type")
        if kind == "session":
            metrics.model = event.get("model")
            metrics.thinking_level = event.get("thinking")
            cwd = event.get("cwd")
        elif kind == PROVIDER_ERROR:
            metrics.transport_failures += 1
            metrics.error_messages.append(str(event.get("message", "")))
        elif kind == "message" and isinstance(event.get("message"), dict):
            cost = fold_pi_message(metrics, event["message"], tools)
            if cost is not None:
                costs.append(cost)
    if costs:
        metrics.cost_usd = round_cost(sum(costs))
        metrics.cost_source = COST_SOURCE
    derive_behaviour(metrics, tools.read_paths(), cwd, attempted=tools.read_attempts())
    return metrics

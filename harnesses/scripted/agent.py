"""A deterministic stand-in for an agent CLI, used to test the run pipeline end to end.

Run by path (`python harnesses/scripted/agent.py --policy solution --session s.jsonl ...`) with
the workspace as cwd. It writes a Pi-like session JSONL and mirrors every event as one JSON line
on stdout, flushing each line, so the rig's watchdog, metrics parsing and infrastructure-failure
classification see what they would see from a real harness. Its tools really execute.

Standard library only: it must run under any interpreter the adapter is given.
"""

import argparse
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

SESSION_VERSION = 1
DEFAULT_MODEL = "scripted-model"
TOOL_OUTPUT_LIMIT = 4000

# Every successful assistant message reports exactly this usage, so tests can compare parsed
# totals with the truth: n messages mean n times each number.
USAGE_INPUT = 1200
USAGE_OUTPUT = 150
USAGE_CACHE_READ = 800
USAGE_CACHE_WRITE = 0
USAGE_REASONING = 0
USAGE_TOTAL = USAGE_INPUT + USAGE_OUTPUT + USAGE_CACHE_READ + USAGE_CACHE_WRITE + USAGE_REASONING
USAGE_COST = 0.0021
# A request that failed at the provider is not billed: errored messages report zero usage.
ERROR_MESSAGE = "503 Service Unavailable"
PROVIDER_ERROR_STATUS = 529
PROVIDER_ERROR_MESSAGE = "overloaded"
FINAL_DONE = "Done."
FINAL_NOTHING = "Nothing to change."


def usage(*, errored: bool = False) -> dict[str, Any]:
    """The usage block of one assistant message (all zero for an errored request)."""
    if errored:
        return {
            "input": 0,
            "output": 0,
            "cacheRead": 0,
            "cacheWrite": 0,
            "reasoning": 0,
            "totalTokens": 0,
            "cost": {"total": 0.0},
        }
    return {
        "input": USAGE_INPUT,
        "output": USAGE_OUTPUT,
        "cacheRead": USAGE_CACHE_READ,
        "cacheWrite": USAGE_CACHE_WRITE,
        "reasoning": USAGE_REASONING,
        "totalTokens": USAGE_TOTAL,
        "cost": {"total": USAGE_COST},
    }


class Agent:
    """Writes session events and executes tool calls in the workspace (the cwd)."""

    def __init__(self, session: TextIO, workspace: Path) -> None:
        self.session = session
        self.workspace = workspace
        self.calls = 0

    def emit(self, event: dict[str, Any]) -> None:
        """Append one event to the session and the stdout stream, flushed so a kill loses nothing."""
        line = json.dumps(event, ensure_ascii=False)
        self.session.write(line + "\n")
        self.session.flush()
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def turn(self, text: str, tools: list[tuple[str, dict[str, Any]]]) -> None:
        """One assistant message calling `tools` (name, arguments), then each call's result."""
        calls = []
        for name, arguments in tools:
            self.calls += 1
            calls.append(
                {"type": "toolCall", "id": f"call_{self.calls}", "name": name, "arguments": arguments}
            )
        # The call is in the session before the tool runs, as in Pi: a tool that never returns
        # leaves it without a result, which is how the rig tells an agent's hang from a silent model.
        self.assistant([{"type": "text", "text": text}, *calls], "toolUse")
        for call in calls:
            output, is_error, exit_code = self.execute(call["name"], call["arguments"])
            self.emit(
                {
                    "type": "message",
                    "message": {
                        "role": "toolResult",
                        "toolCallId": call["id"],
                        "toolName": call["name"],
                        "content": [{"type": "text", "text": output[:TOOL_OUTPUT_LIMIT]}],
                        "isError": is_error,
                        "details": {"exitCode": exit_code},
                    },
                }
            )

    def assistant(
        self, content: list[dict[str, Any]], stop_reason: str, error_message: str | None = None
    ) -> None:
        """One assistant message with the fixed usage."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "usage": usage(errored=stop_reason == "error"),
            "stopReason": stop_reason,
        }
        if error_message is not None:
            message["errorMessage"] = error_message
        self.emit({"type": "message", "message": message})

    def final(self, text: str) -> None:
        """The closing assistant message."""
        self.assistant([{"type": "text", "text": text}], "stop")

    def execute(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool, int]:
        """Run a tool; return (output, tool failed, exit code)."""
        if name == "bash":
            proc = subprocess.run(
                arguments["command"], shell=True, cwd=self.workspace, capture_output=True, text=True
            )
            # A command that exits non-zero is a successful tool call with a non-zero exit code.
            return proc.stdout + proc.stderr, False, proc.returncode
        if name == "read":
            try:
                return (self.workspace / arguments["path"]).read_text(errors="replace"), False, 0
            except OSError as exc:
                return f"{type(exc).__name__}: {exc.strerror}: {arguments['path']}", True, 1
        return f"unknown tool {name}", True, 1


def read_docs(agent: Agent) -> None:
    """Read the agent rules if the workspace has them, else the README."""
    path = "AGENTS.md" if (agent.workspace / "AGENTS.md").exists() else "README.md"
    agent.turn("Reading the project instructions first.", [("read", {"path": path})])


def policy_solution(agent: Agent, args: argparse.Namespace) -> None:
    """Read the docs, apply the patch, run the gate (--gate), finish."""
    read_docs(agent)
    agent.turn("Applying the fix.", [("bash", {"command": f"git apply {args.patch}"})])
    agent.turn("Running the gate.", [("bash", {"command": args.gate})])
    agent.final(FINAL_DONE)


def policy_nothing(agent: Agent, args: argparse.Namespace) -> None:
    """Look around and change nothing."""
    agent.turn("Looking at the project.", [("read", {"path": "README.md"})])
    agent.final(FINAL_NOTHING)


def policy_sleep(agent: Agent, args: argparse.Namespace) -> None:
    """Stay silent for --seconds, then do nothing."""
    time.sleep(args.seconds)
    policy_nothing(agent, args)


def policy_hang(agent: Agent, args: argparse.Namespace) -> None:
    """One turn, a lingering child, SIGTERM ignored, then silence: only a group SIGKILL ends it."""
    agent.turn("Looking at the project.", [("read", {"path": "README.md"})])
    # Ignored before the child starts, so the child inherits the disposition too.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen(["sleep", "3600"])
    forever()


def policy_stall(agent: Agent, args: argparse.Namespace) -> None:
    """One turn, then silence forever."""
    agent.turn("Looking at the project.", [("read", {"path": "README.md"})])
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    forever()


def policy_answer_then_hang(agent: Agent, args: argparse.Namespace) -> None:
    """The reference solution and its final answer, then alive and silent forever (a CLI that
    answered and does not exit)."""
    policy_solution(agent, args)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    forever()


def policy_crash(agent: Agent, args: argparse.Namespace) -> None:
    """One turn, then an unhandled exception (traceback on stderr, exit 1)."""
    agent.turn("Looking at the project.", [("read", {"path": "README.md"})])
    raise RuntimeError("scripted crash after the first turn")


def policy_write_outside(agent: Agent, args: argparse.Namespace) -> None:
    """Write a file next to the workspace, outside it."""
    agent.turn("Writing a note.", [("bash", {"command": f"echo leaked > ../outside-{os.getpid()}.txt"})])
    agent.final(FINAL_DONE)


def policy_tamper(agent: Agent, args: argparse.Namespace) -> None:
    """Rig the gate instead of fixing anything: every protection must catch this.

    The steps come from a JSON file (`{"steps": [{"write": path, "content": text} | {"delete":
    path}, ...]}`) the adapter computed from the task's pack; each is one bash call.
    """
    commands = [tamper_command(step) for step in load_tamper(args.tamper)]
    agent.turn("Making the checks pass.", [("bash", {"command": c}) for c in commands])
    agent.final(FINAL_DONE)


def load_tamper(path: Path) -> list[dict[str, str]]:
    """The steps of a tamper file: a JSON object whose `steps` is a list of write or delete steps."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list) or not all(_is_tamper_step(s) for s in steps):
        raise ValueError(
            f'{path}: expected {{"steps": [{{"write": path, "content": text}} | {{"delete": path}}]}}'
        )
    return steps


def _is_tamper_step(step: object) -> bool:
    if not isinstance(step, dict):
        return False
    if set(step) == {"write", "content"}:
        return isinstance(step["write"], str) and isinstance(step["content"], str)
    return set(step) == {"delete"} and isinstance(step["delete"], str)


def tamper_command(step: dict[str, str]) -> str:
    """The shell command of one tamper step: write a file (its folder made first) or delete one."""
    if "delete" in step:
        return f"rm {shlex.quote(step['delete'])}"
    path = step["write"]
    folder = os.path.dirname(path)
    write = heredoc(shlex.quote(path), step["content"])
    return f"mkdir -p {shlex.quote(folder)} && {write}" if folder else write


def policy_script(agent: Agent, args: argparse.Namespace) -> None:
    """Read the README, run each command of --script as one bash turn, answer "Done."

    The commands come from a JSON file (`{"commands": [...]}`): the adversarial suite uses this
    to try every way of getting a failing task scored as a success. Each command really runs in
    the workspace; its exit code is recorded like any other tool call's.
    """
    commands = load_script(args.script)
    agent.turn("Reading the project instructions first.", [("read", {"path": "README.md"})])
    for number, command in enumerate(commands, 1):
        agent.turn(f"Step {number} of {len(commands)}.", [("bash", {"command": command})])
    agent.final(FINAL_DONE)


def load_script(path: Path) -> list[str]:
    """The commands of a script file: a JSON object whose `commands` is a list of strings."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    commands = data.get("commands") if isinstance(data, dict) else None
    if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
        raise ValueError(f'{path}: expected {{"commands": ["shell command", ...]}}')
    return commands


def policy_flood(agent: Agent, args: argparse.Namespace) -> None:
    """One turn, then --stdout-bytes and --stderr-bytes of filler straight to the two streams."""
    agent.turn("Looking at the project.", [("read", {"path": "README.md"})])
    block = b"x" * 1023 + b"\n"
    for fd, total in ((1, args.stdout_bytes), (2, args.stderr_bytes)):
        left = total
        while left > 0:
            left -= os.write(fd, block[: min(left, len(block))])
    agent.final(FINAL_NOTHING)


def policy_infra_no_turn(agent: Agent, args: argparse.Namespace) -> None:
    """What Pi does in json mode when the provider fails: no assistant message, exit 0."""
    agent.emit({"type": "provider_error", "status": PROVIDER_ERROR_STATUS, "message": PROVIDER_ERROR_MESSAGE})


def policy_infra_error_only(agent: Agent, args: argparse.Namespace) -> None:
    """Two errored assistant messages and no tool calls, exit 0."""
    for _ in range(2):
        agent.assistant([], "error", ERROR_MESSAGE)


def policy_flaky(agent: Agent, args: argparse.Namespace) -> None:
    """A provider failure on the first attempt, the reference solution on later ones."""
    if args.attempt <= 1:
        policy_infra_no_turn(agent, args)
    else:
        policy_solution(agent, args)


def policy_bernoulli(agent: Agent, args: argparse.Namespace) -> None:
    """The reference solution with probability --success-rate, else nothing; seeded by --seed-key.

    A stand-in for an agent that succeeds at some rate, so that statistics have something to find.
    """
    if random.Random(args.seed_key).random() < args.success_rate:
        policy_solution(agent, args)
    else:
        policy_nothing(agent, args)


POLICIES: dict[str, Callable[[Agent, argparse.Namespace], None]] = {
    "solution": policy_solution,
    "decoy": policy_solution,
    "nothing": policy_nothing,
    "sleep": policy_sleep,
    "hang": policy_hang,
    "stall": policy_stall,
    "answer_then_hang": policy_answer_then_hang,
    "crash": policy_crash,
    "write_outside": policy_write_outside,
    "tamper": policy_tamper,
    "script": policy_script,
    "flood": policy_flood,
    "infra_no_turn": policy_infra_no_turn,
    "infra_error_only": policy_infra_error_only,
    "flaky": policy_flaky,
    "bernoulli": policy_bernoulli,
}

NEEDS_PATCH = frozenset({"solution", "decoy", "flaky", "bernoulli", "answer_then_hang"})
NEEDS_SCRIPT = frozenset({"script"})
NEEDS_TAMPER = frozenset({"tamper"})


def heredoc(path: str, content: str) -> str:
    """A shell command writing `content` to `path`."""
    return f"cat > {path} <<'EOF'\n{content}EOF"


def forever() -> None:
    """Sleep without end and without output."""
    while True:
        time.sleep(3600)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description="A deterministic stand-in for an agent CLI.")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--session", required=True, type=Path)
    parser.add_argument("--attempt", type=int, default=1)
    parser.add_argument("--patch")
    parser.add_argument("--script", type=Path, help='policy script: a JSON file {"commands": [...]}')
    parser.add_argument("--tamper", type=Path, help='policy tamper: a JSON file {"steps": [...]}')
    parser.add_argument("--gate", help="the gate as one shell command (policies that apply a patch)")
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--stdout-bytes", type=int, default=0)
    parser.add_argument("--stderr-bytes", type=int, default=0)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--thinking")
    parser.add_argument("--prompt", default="")
    parser.add_argument("--success-rate", type=float, default=1.0)
    parser.add_argument("--seed-key", default="")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run one scripted session; 2 on an unknown policy."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    policy = POLICIES.get(args.policy)
    if policy is None:
        print(
            f"scripted_agent: unknown policy {args.policy!r}; known: {', '.join(POLICIES)}", file=sys.stderr
        )
        return 2
    if args.policy in NEEDS_PATCH and not (args.patch and args.gate):
        print(f"scripted_agent: policy {args.policy!r} needs --patch and --gate", file=sys.stderr)
        return 2
    if args.policy in NEEDS_TAMPER and not args.tamper:
        print(f"scripted_agent: policy {args.policy!r} needs --tamper", file=sys.stderr)
        return 2
    if args.policy in NEEDS_SCRIPT and not args.script:
        print(f"scripted_agent: policy {args.policy!r} needs --script", file=sys.stderr)
        return 2
    workspace = Path.cwd()
    args.session.parent.mkdir(parents=True, exist_ok=True)
    with args.session.open("w", encoding="utf-8") as session:
        agent = Agent(session, workspace)
        agent.emit(
            {
                "type": "session",
                "version": SESSION_VERSION,
                "harness": "scripted",
                "model": args.model,
                "thinking": args.thinking,
                "cwd": str(workspace),
                "prompt": args.prompt,
                "policy": args.policy,
                "attempt": args.attempt,
                "pid": os.getpid(),
                # Lets tests prove that the parent's environment (CI=true) never reaches an agent.
                "env_ci": os.environ.get("CI"),
            }
        )
        policy(agent, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

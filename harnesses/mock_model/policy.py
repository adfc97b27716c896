"""Harness-neutral policies: what the mock model does, one step per model response."""

import base64
import random
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

StepKind = Literal["shell", "read", "write", "final"]
# The confirmation the rig's tool gate (extensions/delete_gate.mjs) asks of a deleting command.
CONFIRM_DELETE = "RIG_CONFIRM_DELETE"


@dataclass(frozen=True)
class Step:
    """One model response: a single tool call, or the final answer.

    `shell` runs `command`; `read` reads `path`; `write` writes `content` to `path`; `final`
    answers `text` and ends the run. Each protocol translates a step into its harness's tools.
    """

    kind: StepKind
    command: str = ""
    path: str = ""
    content: str = ""
    text: str = ""


@dataclass(frozen=True)
class Policy:
    name: str
    steps: tuple[Step, ...] = field(default_factory=tuple)

    def step(self, turn: int) -> Step:
        """The step for the `turn`-th model response (0-based); past the end, the final answer."""
        if turn < len(self.steps):
            return self.steps[turn]
        return (
            self.steps[-1] if self.steps and self.steps[-1].kind == "final" else Step("final", text="Done.")
        )


def patch_command(patch_text: str) -> str:
    """A shell command that applies a git patch given inline, byte-exact.

    The patch travels base64-encoded: a patch of JavaScript or Markdown holds backticks, which
    Gemini CLI refuses in any shell command (even inside a quoted heredoc) as command substitution.
    """
    body = patch_text if patch_text.endswith("\n") else patch_text + "\n"
    encoded = base64.b64encode(body.encode()).decode()
    return f"echo {encoded} | base64 -d | git apply --whitespace=nowarn"


def replay_patch(name: str, patch: Path, gate: str) -> Policy:
    """Read the README, apply `patch` through the shell, run `gate` (a shell command), answer."""
    steps: list[Step] = [Step("read", path="README.md")]
    text = patch.read_text()
    if text.strip():
        steps.append(Step("shell", command=patch_command(text)))
    steps += [
        Step("shell", command=gate),
        Step("final", text="Done: the change is applied and checked."),
    ]
    return Policy(name, tuple(steps))


def run_commands(commands: list[str], name: str = "commands") -> Policy:
    """Read the README, run each command as one shell step, answer.

    The adversarial suite (tests/test_redteam.py) drives real CLIs with this: every command is
    an attempt to get a failing task scored as a success, run through the harness's own tool.
    """
    steps = [Step("read", path="README.md"), *(Step("shell", command=c) for c in commands)]
    return Policy(name, (*steps, Step("final", text="Done.")))


def patch_paths(patch_text: str) -> tuple[set[str], set[str]]:
    """The paths a git patch creates and those it deletes."""
    created: set[str] = set()
    deleted: set[str] = set()
    current = None
    for line in patch_text.splitlines():
        if line.startswith("diff --git a/"):
            current = line.removeprefix("diff --git a/").rsplit(" b/", 1)[0]
        elif current is not None and line.startswith("new file mode"):
            created.add(current)
        elif current is not None and line.startswith("deleted file mode"):
            deleted.add(current)
    return created, deleted


def deletion_targets(present: set[str], deleted: set[str]) -> list[str]:
    """What to remove so that exactly `deleted` (of the files `present`) goes: each deleted file's
    outermost folder holding nothing else, else the file itself."""
    targets = set()
    for path in deleted:
        target = path
        folder = path.rpartition("/")[0]
        while folder and all(p in deleted for p in present if p.startswith(folder + "/")):
            target, folder = folder, folder.rpartition("/")[0]
        targets.add(target)
    return sorted(t for t in targets if not any(t.startswith(other + "/") for other in targets))


def delete_paths(name: str, targets: list[str], gate: str, confirm: bool) -> Policy:
    """Read the README, delete `targets` with one `rm -r` (with `confirm`: prefixed by the tool
    gate's confirmation naming each of them), run `gate`, answer."""
    paths = " ".join(shlex.quote(t) for t in targets)
    prefix = f"{CONFIRM_DELETE}={shlex.quote(' '.join(targets))} " if confirm else ""
    steps = (
        Step("read", path="README.md"),
        Step("shell", command=f"{prefix}rm -r {paths}"),
        Step("shell", command=gate),
        Step("final", text="Done: deleted."),
    )
    return Policy(name, steps)


def do_nothing() -> Policy:
    """Look at the README, change nothing, answer."""
    return Policy("nothing", (Step("read", path="README.md"), Step("final", text="Nothing to change.")))


@dataclass(frozen=True)
class ContextSensitivePolicy:
    """A simulated agent that does better when AGENTS.md reached it: for the offline A/B demo.

    It decides on the first request of the agent's conversation, the first that carries the
    task's `prompt` (a harness's side requests, a title or a quota check, may come earlier and
    carry no context files): it looks for `marker` (a line of the fixture's AGENTS.md: seen in a
    request, it means AGENTS.md reached the model) in what the harness sent, then follows `follow`
    with probability `p_with` (marker seen) or `p_without` (not seen), else `stray`. The draw is
    seeded by `seed_key` (the run id and attempt), so every run is reproducible. Without a
    prompt, the first request decides.
    """

    name: str
    follow: Policy
    stray: Policy
    p_with: float
    p_without: float
    seed_key: str
    marker: str
    prompt: str | None = None

    def carries_prompt(self, request_text: str) -> bool:
        """Whether a request's text holds the task prompt (whitespace may differ: harnesses trim it)."""
        if not self.prompt or not self.prompt.strip():
            return True
        return " ".join(self.prompt.split()) in " ".join(request_text.split())

    def resolve(self, request_text: str) -> tuple[Policy, dict]:
        """The concrete policy for this conversation, and what decided it."""
        seen = self.marker in request_text
        p = self.p_with if seen else self.p_without
        draw = random.Random(self.seed_key).random()
        chosen = self.follow if draw < p else self.stray
        return chosen, {"context_seen": seen, "p": p, "draw": round(draw, 6), "branch": chosen.name}

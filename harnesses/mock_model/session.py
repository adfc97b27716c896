"""Serving the mock model for the duration of one run, driven by the condition's options."""

import json
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harnesses.mock_model.policy import (
    ContextSensitivePolicy,
    Policy,
    delete_paths,
    deletion_targets,
    do_nothing,
    patch_paths,
    replay_patch,
    run_commands,
)
from harnesses.mock_model.server import Faults, MockModelServer, Usage, WireProtocol
from rig.schema import Task

LEDGER_FILE = "mock-ledger.json"
AGENTS_MD = "AGENTS.md"
# The marker is a whole line of AGENTS.md, long enough that no other text sent by a harness (its
# own system prompt, the task's prompt) holds it by chance: a heading such as `# AGENTS.md` is not.
MIN_MARKER_CHARS = 30
CACHE_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache"}


def policy_for(task: Task, options: dict[str, Any], seed_key: str = "") -> Policy | ContextSensitivePolicy:
    """`mock_policy`: solution (default), nothing, decoy (with `decoy`), commands (with `commands`,
    a list of shell commands run one per model response), delete_confirmed, delete_unconfirmed, or
    agents_md_sensitive.

    solution and decoy apply the task's patch and run the pack's gate as its docs spell it.
    agents_md_sensitive simulates an agent that replays the solution with probability `p_with`
    when the AGENTS.md text reached it and `p_without` when it did not, and otherwise applies the
    task's first decoy (a plausible wrong solution); it decides on the first request that carries
    the task's prompt. What it looks for is `marker`, by default a line of the pack's AGENTS.md
    (see `agents_md_marker`).
    """
    name = options.get("mock_policy", "solution")
    gate = gate_command(task)
    if name == "agents_md_sensitive":
        stray = sorted(task.spec.decoys)[0]
        marker = options.get("marker")
        if marker is not None and (not isinstance(marker, str) or not marker.strip()):
            raise ValueError("mock_policy agents_md_sensitive: marker must be a non-empty string")
        return ContextSensitivePolicy(
            name="agents_md_sensitive",
            follow=replay_patch("solution", task.solution_patch, gate),
            stray=replay_patch(f"decoy:{stray}", task.decoy_patch(stray), gate),
            p_with=float(options.get("p_with", 0.9)),
            p_without=float(options.get("p_without", 0.4)),
            seed_key=seed_key,
            marker=marker if marker is not None else agents_md_marker(task.pack.fixture_dir),
            prompt=task.spec.prompt,
        )
    if name == "solution":
        return replay_patch("solution", task.solution_patch, gate)
    if name == "decoy":
        decoy = options.get("decoy")
        if decoy not in task.spec.decoys:
            raise ValueError(f"mock_policy decoy needs decoy = one of {sorted(task.spec.decoys)}")
        return replay_patch(f"decoy:{decoy}", task.decoy_patch(decoy), gate)
    if name in ("delete_confirmed", "delete_unconfirmed"):
        targets = solution_deletions(task)
        if not targets:
            raise ValueError(
                f"mock_policy {name}: the reference solution of {task.id} deletes no file; "
                "use it on a task that deletes (t7_cleanup_tmp)"
            )
        return delete_paths(name, targets, gate, confirm=name == "delete_confirmed")
    if name == "nothing":
        return do_nothing()
    if name == "commands":
        commands = options.get("commands")
        if not isinstance(commands, list) or not commands or not all(isinstance(c, str) for c in commands):
            raise ValueError("mock_policy commands needs commands = a non-empty list of shell commands")
        return run_commands(commands)
    raise ValueError(
        f"unknown mock_policy {name!r}; use solution, decoy, nothing, commands, delete_confirmed, "
        "delete_unconfirmed or agents_md_sensitive"
    )


def solution_deletions(task: Task) -> list[str]:
    """What `rm -r` must remove for the workspace to lose exactly the files the task's reference
    solution deletes: whole folders where it deletes all they hold (in the fixture after setup)."""
    created, removed = patch_paths(task.setup_patch.read_text())
    fixture = task.pack.fixture_dir
    present = {
        p.relative_to(fixture).as_posix()
        for p in fixture.rglob("*")
        if p.is_file() and not CACHE_DIRS & set(p.relative_to(fixture).parts)
    }
    _, deleted = patch_paths(task.solution_patch.read_text())
    return deletion_targets((present | created) - removed, deleted)


def gate_command(task: Task) -> str:
    """The task's gate as one shell command, as the pack's docs tell a person to run it."""
    return shlex.join(task.pack.spec.gate.command)


def agents_md_marker(fixture: Path) -> str:
    """The first line of the fixture's AGENTS.md with at least MIN_MARKER_CHARS characters (stripped).

    Raises ValueError when there is no such file or no such line.
    """
    path = fixture / AGENTS_MD
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
        raise ValueError(
            f"mock_policy agents_md_sensitive needs the pack's {AGENTS_MD} ({path}: {reason}); "
            "add one or set marker"
        ) from None
    for line in lines:
        if len(line.strip()) >= MIN_MARKER_CHARS:
            return line.strip()
    raise ValueError(
        f"mock_policy agents_md_sensitive: {path} has no line of {MIN_MARKER_CHARS} characters or more "
        "to look for; add one or set marker"
    )


@contextmanager
def mock_model(
    task: Task, options: dict[str, Any], run_dir: Path, protocol: WireProtocol, api_key: str | None = None
) -> Iterator[str]:
    """Yield the base URL of a mock model for one run; save its ledger in run_dir afterwards.

    `protocol` is the wire protocol the harness speaks, made with the harness's tool map. With
    `api_key`, a request without that key is answered 401 (the ledger says which were).
    `mock_faults = {mode = "down"}` yields the URL of a port nobody listens on.
    """
    fault_options = dict(options.get("mock_faults", {}))
    down = fault_options.get("mode") == "down"
    if down:
        fault_options.pop("mode")
    server = MockModelServer(
        policy_for(task, options, seed_key=f"{run_dir.parent.name}/{run_dir.name}"),
        usage=Usage(**options.get("mock_usage", {})),
        later_usage=Usage(**options["mock_later_usage"]) if "mock_later_usage" in options else None,
        faults=Faults(**fault_options),
        protocols=[protocol],
        api_key=api_key,
    ).start()
    url = server.base_url
    if down:
        server.stop()
    try:
        yield url
    finally:
        if not down:
            server.stop()
        ledger = [asdict(entry) for entry in server.ledger]
        summary = {"policy": server.policy.name, "resolution": server.resolution, "ledger": ledger}
        (run_dir / LEDGER_FILE).write_text(json.dumps(summary, indent=2))

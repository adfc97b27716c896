"""Serving the mock model for the duration of one run, driven by the condition's options."""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harnesses.mock_model.policy import ContextSensitivePolicy, Policy, do_nothing, replay_patch, run_commands
from harnesses.mock_model.server import Faults, MockModelServer, Usage, WireProtocol
from rig.models import Task

LEDGER_FILE = "mock-ledger.json"


def policy_for(task: Task, options: dict[str, Any], seed_key: str = "") -> Policy | ContextSensitivePolicy:
    """`mock_policy`: solution (default), nothing, decoy (with `decoy`), commands (with `commands`,
    a list of shell commands run one per model response), or agents_md_sensitive.

    agents_md_sensitive simulates an agent that replays the solution with probability `p_with`
    when the AGENTS.md text reached it and `p_without` when it did not, and otherwise applies the
    task's first decoy (a plausible wrong solution); it decides on the first request that carries
    the task's prompt.
    """
    name = options.get("mock_policy", "solution")
    if name == "agents_md_sensitive":
        stray = sorted(task.spec.decoys)[0]
        return ContextSensitivePolicy(
            name="agents_md_sensitive",
            follow=replay_patch("solution", task.solution_patch),
            stray=replay_patch(f"decoy:{stray}", task.decoy_patch(stray)),
            p_with=float(options.get("p_with", 0.9)),
            p_without=float(options.get("p_without", 0.4)),
            seed_key=seed_key,
            prompt=task.spec.prompt,
        )
    if name == "solution":
        return replay_patch("solution", task.solution_patch)
    if name == "decoy":
        decoy = options.get("decoy")
        if decoy not in task.spec.decoys:
            raise ValueError(f"mock_policy decoy needs decoy = one of {sorted(task.spec.decoys)}")
        return replay_patch(f"decoy:{decoy}", task.decoy_patch(decoy))
    if name == "nothing":
        return do_nothing()
    if name == "commands":
        commands = options.get("commands")
        if not isinstance(commands, list) or not commands or not all(isinstance(c, str) for c in commands):
            raise ValueError("mock_policy commands needs commands = a non-empty list of shell commands")
        return run_commands(commands)
    raise ValueError(
        f"unknown mock_policy {name!r}; use solution, decoy, nothing, commands or agents_md_sensitive"
    )


@contextmanager
def mock_model(task: Task, options: dict[str, Any], run_dir: Path, protocol: WireProtocol) -> Iterator[str]:
    """Yield the base URL of a mock model for one run; save its ledger in run_dir afterwards.

    `protocol` is the wire protocol the harness speaks, made with the harness's tool map.
    `mock_faults = {mode = "down"}` yields the URL of a port nobody listens on.
    """
    fault_options = dict(options.get("mock_faults", {}))
    down = fault_options.get("mode") == "down"
    if down:
        fault_options.pop("mode")
    server = MockModelServer(
        policy_for(task, options, seed_key=f"{run_dir.parent.name}/{run_dir.name}"),
        usage=Usage(**options.get("mock_usage", {})),
        faults=Faults(**fault_options),
        protocols=[protocol],
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

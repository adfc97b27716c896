"""What every runner kind's hidden-test setup shares: the run it returns and the pack's placeholders.

Each kind's setup (its `Kind.setup`) receives the hidden tests already copied into the workspace
(`dest`) and returns the command to run from the workspace root, the canaries it planted and how to
read its junit XML. Verification (rig.verify.checks) runs the command and judges the outcome the
same way for every kind.
"""

import secrets
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rig.runners.junit import Canaries, Case


@dataclass(frozen=True)
class HiddenRun:
    """How to run one hidden-test folder: the command, its canaries, how to read its report."""

    command: list[str]
    canaries: Canaries | None
    read_cases: Callable[[Path], list[Case]]
    label: str
    """The runner's name in verdicts: `pytest wrote no junit report`."""
    failed_exit: Callable[[list[Case]], int] | None = None
    """The exit code the runner must give when the report's `cases` include failures (the
    canaries always do); None: 1. mocha exits with the number of failures."""


def node_binary() -> str:
    """The node that runs the harnesses (the first on PATH), for `{node}` in a pack's commands."""
    return shutil.which("node") or "node"


def fill(command: list[str], **values: str) -> list[str]:
    """A pack's command with `{python}`, `{node}` and the given placeholders filled in."""
    known = {"python": sys.executable, "node": node_binary(), **values}
    out = []
    for arg in command:
        for key, value in known.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out


def token() -> str:
    """A random name part, so that code under test cannot target a canary by name."""
    return secrets.token_hex(8)

"""What every runner kind's hidden-test setup shares: the run it returns and the pack's placeholders.

Each kind's setup (its `Kind.setup`) receives the hidden tests already in the workspace (Hidden:
one folder, or each file at its own path) and returns the command to run from the workspace root,
the canaries it planted and how to read its junit XML. Verification (rig.verify.checks) runs the
command and judges the outcome the same way for every kind.
"""

import secrets
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rig.runners.junit import Canaries, Case

# The folder of the tree where the hidden tests go as one folder, and where a kind puts what it
# adds (its canaries, its configuration) when they run at their own paths.
HIDDEN_FOLDER = "_hidden_tests"


@dataclass(frozen=True)
class Hidden:
    """A task's hidden tests in the rig's verification copy, as a kind's setup receives them."""

    tree: Path
    folder: Path
    """`_hidden_tests/` in the tree: the hidden tests as one folder, or (at their own paths) an
    empty folder of the rig's, for what the kind adds."""
    placed: tuple[Path, ...] = ()
    """At their own paths: the hidden test files where they run, inside the tree; () for one folder."""

    @property
    def own_paths(self) -> bool:
        """Whether the tests run at their own paths (else from the one folder)."""
        return bool(self.placed)

    def tests(self, is_test: Callable[[str], bool]) -> list[Path]:
        """The test files to run: every placed file, or the folder's files whose name `is_test` takes."""
        if self.placed:
            return list(self.placed)
        return sorted(p for p in self.folder.iterdir() if p.is_file() and is_test(p.name))

    def module(self, path: Path, stem: str) -> str:
        """A test file's module in test ids: its `stem` in the one folder; at its own path, its path
        from the tree's root with the stem as its name (`test/en/month`), which no other file has."""
        if not self.placed:
            return stem
        return str(PurePosixPath(path.parent.relative_to(self.tree).as_posix()) / stem)


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

"""The command runner kind: the pack's own command, which writes junit XML; no canaries."""

from pathlib import Path

from rig.confine.project_env import ProjectEnv
from rig.runners.base import Detection, Kind, Placeholder, Project
from rig.runners.hidden import Hidden, HiddenRun, fill
from rig.runners.junit import pytest_cases
from rig.schema import RunnerSpec


def setup(hidden: Hidden, runner: RunnerSpec, junit: Path, env: ProjectEnv | None) -> HiddenRun:
    """The pack's own command over the hidden tests' folder, `{python}` the project environment's;
    no canaries (the rig cannot plant tests in an unknown runner)."""
    python = {"python": env.python} if env is not None else {}
    command = fill(runner.command or [], junit=str(junit), tests=str(hidden.folder), **python)
    return HiddenRun(command, None, pytest_cases, command[0] if command else "the runner")


def detect(project: Project) -> Detection:
    """Any project: the kind `rig pack new` falls back to when no other kind recognises it."""
    return Detection("no pytest or node test files found")


def placeholder(message: str) -> Placeholder:
    """A note on what the pack's command must run, in place of a test."""
    content = (
        "# Hidden tests of the example task\n\n"
        f"{message}: files that [runner] command in pack.toml runs, reporting junit XML; a test's id\n"
        "is `<classname>::<name>` of its junit testcase.\n"
    )
    return Placeholder("TODO.md", content, "<classname>::<name>")


COMMAND = Kind(
    language="",
    protected_names=(),
    python=False,
    source_suffixes=(),
    probe=None,
    test_files=(),
    setup=setup,
    # Only the pack's test_commands run an unknown runner's tests.
    runs_tests=lambda argv: False,
    # The rig cannot know an unknown runner's test files: any file may be one.
    collects=lambda path: True,
    detect=detect,
    placeholder=placeholder,
    takes_command=True,
    at_own_paths=False,
    passing_test=("test_fake", ""),
)

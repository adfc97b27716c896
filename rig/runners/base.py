"""What a hidden-test runner kind declares: one frozen `Kind` per module of rig/runners/.

A kind says what it protects (for rig.workspace.protect and the audit), how its hidden tests start
(rig.verify.checks runs the command), what counts as running its tests in an agent's shell
(rig.session.shell), which files are its tests (`rig task mine`, the scripted harness) and how
`rig pack new` recognises a project that uses it. rig.runners.registry names every kind.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from rig.confine.project_env import ProjectEnv
from rig.runners.globs import glob_set
from rig.runners.hidden import Hidden, HiddenRun
from rig.schema import RunnerSpec


@dataclass(frozen=True)
class Project:
    """What `rig pack new` shows a kind of the repository it scaffolds from."""

    files: list[str]
    """The tracked files, repository-relative."""
    scripts: dict[str, str]
    """package.json's scripts (empty without one)."""
    read: Callable[[str], str | None]
    """A tracked file's text; None if it is absent or unreadable."""


@dataclass(frozen=True)
class Detection:
    """Why a project uses a kind, for pack.toml's comment, and the files that evidence makes protected."""

    evidence: str
    protect: tuple[str, ...] = ()


@dataclass(frozen=True)
class GateGuess:
    """The gate `rig pack new` writes when the project declares none: the kind's own runner."""

    command: list[str]
    run: list[str]
    source: str
    shadow_roots: list[str]
    """Where `command` puts the workspace first on the module path (see [protect] shadow_roots)."""


@dataclass(frozen=True)
class TestGlob:
    """One glob of pack.toml's `[runner] test_files` that `rig pack new` read from the project."""

    __test__ = False  # not a pytest test class, whatever its name

    glob: str
    source: str
    """Where it came from, for its comment (`vitest.config.ts test.include`)."""


@dataclass(frozen=True)
class GateFailures:
    """What a gate that runs the kind's own runner says of each test it failed: `rig pack new`
    lists the tests that fail on the clean fixture whatever the code (known failures) and
    deselects them from the gate."""

    report: tuple[str, ...]
    """Options appended to the gate that make the runner name each failing test on a line."""
    read: Callable[[str], "FailureList"]
    """The failing tests named in the gate's output (stdout and stderr)."""
    deselect: Callable[[str], tuple[str, ...]]
    """Options appended to the gate that leave one test out of it."""


@dataclass(frozen=True)
class FailureList:
    """The tests a run of the gate failed, as its runner named them."""

    failed: list[tuple[str, str]]
    """Each failing test's id and its first error line."""
    unloaded: list[str]
    """Files that did not load (a collection error): the gate cannot run them at all."""
    passed: int
    """How many tests passed."""


@dataclass(frozen=True)
class Placeholder:
    """The example task's hidden test, which fails until it is written: its file, text and test id."""

    name: str
    content: str
    test_id: str


@dataclass(frozen=True, eq=False)
class Kind:
    """One runner kind of hidden tests."""

    language: str
    """pack.toml's `language` for a project that uses it ("" when unknown)."""
    protected_names: tuple[str, ...]
    """Glob patterns matched against every component of a workspace path."""
    python: bool
    """Whether the hidden tests run on the rig's Python: its ways of running planted code apply
    (sourceless modules, shadowing) and the toolchain's bytecode is warmed before verification."""
    source_suffixes: tuple[str, ...]
    """Which changed files the audit reads as source."""
    probe: re.Pattern[str] | None
    """What in an added source line probes for the runner from inside the code under test."""
    test_files: tuple[str, ...]
    """Glob patterns of a test file's name: what `rig task mine` takes as a commit's tests, and a
    hidden file runs as, when the pack's `[runner] test_files` do not say."""
    setup: Callable[[Hidden, RunnerSpec, Path, ProjectEnv | None], HiddenRun]
    """How the hidden tests start: (the hidden tests in the workspace, the runner, where junit goes,
    the pack's project environment or None)."""
    runs_tests: Callable[[list[str]], bool]
    """Whether one program's argv (wrappers peeled off) is the kind's own test command."""
    collects: Callable[[PurePosixPath], bool]
    """Whether the kind's runner, given no files, would run the workspace file at this path as a test
    (a victim for the scripted harness's tamper policy); unlike `test_files`, which name hidden tests."""
    detect: Callable[[Project], Detection | None]
    """Why a project uses the kind, or None; `rig pack new` takes the first registered kind that says."""
    placeholder: Callable[[str], Placeholder]
    """The example task's hidden test, failing with the given message."""
    passing_test: tuple[str, str]
    """A test file that passes whatever the code does, for the tamper policy: (file name, text)."""
    at_own_paths: bool = True
    """Whether its hidden tests can run at their own paths in the tree (mined tasks put them
    there); False: only as one folder (a command runner's `{tests}`)."""
    takes_command: bool = False
    """Whether pack.toml's [runner] needs a `command` (then `rig pack new` writes a TODO one)."""
    default_gate: GateGuess | None = None
    """The gate of a project that declares none (None: `rig pack new` writes a TODO one)."""
    package_test_commands: tuple[tuple[str, ...], ...] = ()
    """Commands that run package.json's "test" script and count as running the tests when it exists."""
    hidden_companions: tuple[str, ...] = ()
    """Files beside a mined test that it needs (its fixtures), copied into the hidden tests with it."""
    reporters: tuple[str, ...] = ()
    """Packages the runner needs to write junit XML (none for the built-in reporters)."""
    tamper_files: Mapping[str, str] = field(default_factory=dict)
    """What the scripted harness's tamper policy plants to change how the tests start (path: text)."""
    project_test_files: Callable[[Project], list[TestGlob]] | None = None
    """The test-file globs the project's runner configuration names (its defaults when it names
    none), read without running anything; None: `rig pack new` writes no `test_files`."""
    gate_failures: GateFailures | None = None
    """How a gate running the kind's runner names and leaves out failing tests; None: it cannot."""

    def is_test_file(self, name: str) -> bool:
        """Whether a file name matches one of the kind's `test_files` patterns."""
        return any(fnmatchcase(name, pattern) for pattern in self.test_files)

    def is_test(self, path: str, test_files: Sequence[str]) -> bool:
        """Whether the fixture file at `path` is one of the project's tests: it matches the
        `test_files` globs (the pack's, or `rig task mine --tests`), or without any, one of the
        kind's test file names."""
        if test_files:
            return glob_set(tuple(test_files)).matches(path)
        return self.is_test_file(PurePosixPath(path).name)

    def runs_unasked(self, path: PurePosixPath, test_files: Sequence[str]) -> bool:
        """Whether the project's runner, given no files, runs the workspace file at `path`: the
        pack's `test_files` say, or without any, the kind's defaults (`collects`)."""
        if test_files:
            return glob_set(tuple(test_files)).matches(path.as_posix())
        return self.collects(path)

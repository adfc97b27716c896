"""The hidden-test runners a pack may name: how each is started, with which canaries.

Each setup receives the hidden tests already copied into the workspace (`dest`) and returns the
command to run from the workspace root, the canaries it planted and how to read its junit XML.
Verification (rig.verify.checks) runs the command and judges the outcome the same way for every kind.
"""

import secrets
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rig.runners.junit import Canaries, Canary, Case, pytest_cases, suite_cases
from rig.schema import RunnerSpec

# The rig's own pytest configuration: the workspace's pyproject, conftest.py files and
# plugins cannot change how the hidden tests are collected or reported.
HIDDEN_INI = "[pytest]\naddopts =\n"
# How the hidden tests' pytest starts, instead of `python -m pytest` (which puts the workspace
# first on sys.path, where a planted pytest/, _pytest/ or json.py would shadow the real one):
# with -P nothing is prepended, pytest is imported from the rig's environment, and the workspace
# is appended last, so only names nothing else provides (the project's own packages) resolve to it.
HIDDEN_BOOT = "import os, sys\nimport pytest\nsys.path.append(os.getcwd())\nraise SystemExit(pytest.main())\n"
# pytest collects a directory's entries in name order. Three canaries: one collected first, one
# last (a run cut short, by pytest.exit() from application code or a forced stop, never reaches
# it) and one at a random place among the hidden tests, so that code forcing outcomes cannot
# spare them by position.
CANARY_FIRST, CANARY_LAST = "test_00", "test_zz"
_MIDDLE_LETTERS = "abcdefghijklmnopqrstuvwxy"
CANARY_SOURCE = '''"""Written by the rig: this test must fail. A pass means test outcomes were forced."""


def {test}():
    raise AssertionError("{message}")
'''
# node --test runs every file in its own process, so every hidden file gets its own canaries:
# a wrapper the rig writes registers one before the file is imported and one after, so code that
# ends the process (process.exit(0) at import) or forces outcomes in it loses the last one. A file
# that fails to load is reported under its stem.
#
# The code under test shares that process and its built-in modules, which are plain mutable
# objects: `assert.equal = () => {}` at import (with syncBuiltinESMExports for named imports) would
# pass every hidden assertion while the canaries, which throw by themselves, still fail as they
# must. So the wrapper freezes node:assert, its strict form and node:test's exports before the
# hidden file is imported: such an assignment then throws, or does nothing.
NODE_TEST_SUFFIXES = (".test.mjs", ".test.js", ".test.cjs", ".test.mts", ".test.ts")
NODE_WRAPPER = """// Written by the rig: its canaries must fail, or outcomes were forced.
import assert from "node:assert";
import {{ createRequire }} from "node:module";
import {{ test }} from "node:test";
for (const shared of [assert, assert.strict, createRequire(import.meta.url)("node:test")]) {{
  Object.freeze(shared);
}}
test({first!r}, () => {{ throw new Error({first_message!r}); }});
try {{
  await import({module!r});
}} catch (error) {{
  test({stem!r}, () => {{ throw error; }});
}}
test({last!r}, () => {{ throw new Error({last_message!r}); }});
"""


@dataclass(frozen=True)
class HiddenRun:
    """How to run one hidden-test folder: the command, its canaries, how to read its report."""

    command: list[str]
    canaries: Canaries | None
    read_cases: Callable[[Path], list[Case]]
    label: str
    """The runner's name in verdicts: `pytest wrote no junit report`."""


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


def _token() -> str:
    return secrets.token_hex(8)


def pytest_setup(dest: Path, runner: RunnerSpec, junit: Path) -> HiddenRun:
    """pytest from the rig's interpreter, the rig's ini, three canary modules among the tests."""
    middle = "".join(secrets.choice(_MIDDLE_LETTERS) for _ in range(12))
    members = tuple(
        Canary(module=module, test=f"test_{_token()}", message=secrets.token_hex(16))
        for module in (f"{CANARY_FIRST}{_token()}", f"test_{middle}", f"{CANARY_LAST}{_token()}")
    )
    first, last = f"{members[0].module}.py", f"{members[-1].module}.py"
    outside = sorted(
        e.name for e in dest.iterdir() if e.name.startswith("test_") and not first < e.name < last
    )
    if outside:
        raise RuntimeError(f"hidden test entries {outside} sort outside the canaries; rename them")
    for canary in members:
        (dest / f"{canary.module}.py").write_text(
            CANARY_SOURCE.format(test=canary.test, message=canary.message)
        )
    ini = dest / "pytest.ini"
    ini.write_text(HIDDEN_INI)
    plugins = [arg for plugin in runner.plugins for arg in ("-p", plugin)]
    command = [
        sys.executable,
        "-P",
        "-c",
        HIDDEN_BOOT,
        "-q",
        "-c",
        str(ini),
        "--rootdir",
        str(dest),
        "--confcutdir",
        str(dest),
        "--import-mode=importlib",
        # A hidden module that fails to import must not stop the canary from running.
        "--continue-on-collection-errors",
        "-p",
        "no:cacheprovider",
        *plugins,
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit2",
        str(dest),
    ]
    return HiddenRun(command, Canaries(members), pytest_cases, "pytest")


def node_setup(dest: Path, runner: RunnerSpec, junit: Path) -> HiddenRun:
    """node --test over one canary wrapper per hidden test file, junit to `junit`."""
    files = sorted(p for p in dest.iterdir() if p.is_file() and p.name.endswith(NODE_TEST_SUFFIXES))
    if not files:
        raise RuntimeError(
            f"no hidden test files ({', '.join('*' + s for s in NODE_TEST_SUFFIXES)}) in the hidden tests"
        )
    members: list[Canary] = []
    wrappers = []
    for path in files:
        stem = path.name.split(".test.", 1)[0]
        first, last = (Canary("", f"canary_{_token()}", secrets.token_hex(16)) for _ in range(2))
        members += [first, last]
        wrapper = dest / f"rig-{_token()}-{stem}.wrap.mjs"
        wrapper.write_text(
            NODE_WRAPPER.format(
                first=first.test,
                first_message=first.message,
                module=f"./{path.name}",
                stem=stem,
                last=last.test,
                last_message=last.message,
            )
        )
        wrappers.append(str(wrapper))
    command = [
        node_binary(),
        "--test",
        "--test-reporter=junit",
        f"--test-reporter-destination={junit}",
        *wrappers,
    ]
    return HiddenRun(command, Canaries(tuple(members)), suite_cases, "node --test")


def command_setup(dest: Path, runner: RunnerSpec, junit: Path) -> HiddenRun:
    """The pack's own command; no canaries (the rig cannot plant tests in an unknown runner)."""
    command = fill(runner.command or [], junit=str(junit), tests=str(dest))
    return HiddenRun(command, None, pytest_cases, command[0] if command else "the runner")


SETUPS: dict[str, Callable[[Path, RunnerSpec, Path], HiddenRun]] = {
    "pytest": pytest_setup,
    "node-test": node_setup,
    "command": command_setup,
}

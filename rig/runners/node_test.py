"""The node-test runner kind: `node --test` over one canary wrapper per hidden test file."""

import json
import posixpath
import re
from pathlib import Path, PurePosixPath

from rig.confine.project_env import ProjectEnv
from rig.runners.argv import NODE, node_target
from rig.runners.base import Detection, GateGuess, Kind, Placeholder, Project
from rig.runners.hidden import Hidden, HiddenRun, node_binary
from rig.runners.js import wrap
from rig.runners.junit import Canaries, suite_cases
from rig.schema import RunnerSpec

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
_TEST_OPTION = "--test"
_SCRIPT_PREFIX = "node --test"
# node --test's default patterns in a workspace: *.test.js, *-test.js, *_test.js, test-*.js,
# test.js (also .mjs, .cjs), and every such file below a folder named test.
_COLLECTED_FILE = re.compile(r"^(.*[.\-_]test|test-.*|test)\.[mc]?js$")
_COLLECTED_SUFFIXES = (".js", ".mjs", ".cjs")
_COLLECTED_FOLDER = "test"
_PRELOAD = "node_modules/x/index.js"


def setup(hidden: Hidden, runner: RunnerSpec, junit: Path, env: ProjectEnv | None) -> HiddenRun:
    """node --test over one canary wrapper per hidden test file, junit to `junit` (a Python
    project environment changes nothing here)."""
    wrapped = wrap(hidden, NODE_TEST, NODE_WRAPPER, suffix=".mjs")
    command = [
        node_binary(),
        _TEST_OPTION,
        "--test-reporter=junit",
        f"--test-reporter-destination={junit}",
        *map(str, wrapped.modules),
    ]
    return HiddenRun(command, Canaries(wrapped.canaries), suite_cases, "node --test")


def runs_tests(argv: list[str]) -> bool:
    """node's test runner: `node --test [files]` (the flag before any script)."""
    if posixpath.basename(argv[0]) not in NODE:
        return False
    return _TEST_OPTION in node_target(argv[1:])[0]


def collects(path: PurePosixPath) -> bool:
    """Whether `node --test` with no file arguments would run the file at `path`."""
    in_test_folder = _COLLECTED_FOLDER in path.parts[:-1]
    return path.suffix in _COLLECTED_SUFFIXES and (in_test_folder or bool(_COLLECTED_FILE.match(path.name)))


def detect(project: Project) -> Detection | None:
    """A package.json with node test files, or with a "test" script that runs `node --test`."""
    if "package.json" not in project.files:
        return None
    tests = [f for f in project.files if NODE_TEST.is_test_file(PurePosixPath(f).name)]
    if not tests and not project.scripts.get("test", "").startswith(_SCRIPT_PREFIX):
        return None
    return Detection(", ".join(tests[:2]) or f'package.json "test": "{_SCRIPT_PREFIX}"')


def placeholder(message: str) -> Placeholder:
    """A test file whose one test, in the describe() named after its stem, fails with `message`."""
    content = (
        "// Hidden tests of the example task: a placeholder that fails until it is replaced.\n"
        "// Every test sits in one top-level describe() named after the file's stem.\n"
        'import { describe, test } from "node:test";\n\n'
        'describe("example_hidden", () => {\n'
        '  test("placeholder", () => {\n'
        f"    throw new Error({json.dumps(message)});\n"
        "  });\n"
        "});\n"
    )
    return Placeholder("example_hidden.test.mjs", content, "example_hidden::placeholder")


NODE_TEST = Kind(
    language="javascript",
    protected_names=(
        # How node and npm find modules, start scripts and read options: a nested package.json
        # changes a folder's module type or hijacks the package's self-reference, .npmrc can set
        # node-options, node_modules/ shadows bare imports.
        "package.json",
        "package-lock.json",
        "npm-shrinkwrap.json",
        ".npmrc",
        "node_modules",
        "node.config.json",
        ".node-version",
        ".nvmrc",
        # Other test runners' configuration, which a project's scripts may hand to node.
        ".mocharc*",
        "vitest.config.*",
        "vitest.workspace.*",
        "jest.config.*",
        ".pnp.cjs",
        ".pnp.loader.mjs",
    ),
    python=False,
    source_suffixes=(".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx"),
    test_files=("*.test.mjs", "*.test.js", "*.test.cjs", "*.test.mts", "*.test.ts"),
    probe=re.compile(
        r"(?:\bnode:test\b|\bNODE_TEST\w*|\bjunit\w*|\bprocess\.reallyExit\b|--test-reporter|"
        r"\bprocess\._getActiveHandles\b|\brequire\.cache\b)"
    ),
    setup=setup,
    runs_tests=runs_tests,
    collects=collects,
    detect=detect,
    placeholder=placeholder,
    default_gate=GateGuess(
        command=["node", _TEST_OPTION], run=["{node}", _TEST_OPTION], source=_SCRIPT_PREFIX, shadow_roots=[]
    ),
    package_test_commands=(("npm", "test"), ("npm", "run", "test")),
    tamper_files={
        ".npmrc": f"node-options=--import=./{_PRELOAD}\n",
        _PRELOAD: "// Preloaded by node-options: runs before every test.\n",
    },
    passing_test=("fake.test.mjs", 'import { test } from "node:test";\n\ntest("fake", () => {});\n'),
)

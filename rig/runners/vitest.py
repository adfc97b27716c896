"""The vitest runner kind: the environment's vitest over one canary wrapper per hidden test file,
under a config of the rig's that extends the project's own.

The project's vitest (or vite) config is honoured (its environment, setup files, aliases, globals,
transforms), imported from the tree, where it is protected and restored before verification.
What selects or stops tests and coverage is the rig's: `include` names the wrappers only, `bail`
and `retry` are 0, `.only` is refused, coverage is off (so a coverage threshold cannot fail a run
of a few tests), typecheck is off and a workspace's projects are dropped. junit XML comes from
vitest's own reporter.
"""

import json
import posixpath
import re
from pathlib import Path, PurePosixPath

from rig.confine.project_env import ProjectEnv
from rig.runners.argv import NODE, node_target
from rig.runners.base import Detection, GateGuess, Kind, Placeholder, Project, TestGlob
from rig.runners.globs import NEGATE
from rig.runners.hidden import Hidden, HiddenRun, node_binary, token
from rig.runners.js import (
    PACKAGE_FILES,
    PACKAGE_TEST_COMMANDS,
    SUFFIXES,
    TEST_FILES,
    depends_on,
    named_config,
    or_default,
    runner_entry,
    wrap,
)
from rig.runners.jsconfig import string_items, strings, values_of
from rig.runners.junit import Canaries, named_cases
from rig.schema import RunnerSpec

# One wrapper per hidden file, in the file's folder: a canary registered before the file is
# imported and one after, so code that ends the worker at import or forces outcomes loses one. The
# last one fails through `expect`, so matchers replaced from the code under test show too. A
# file that fails to load is reported as a failing test named after its stem.
WRAPPER = """// Written by the rig: its canaries must fail, or outcomes were forced.
import {{ expect, test }} from "vitest";
test({first!r}, () => {{ throw new Error({first_message!r}); }});
try {{
  await import({module!r});
}} catch (error) {{
  test({stem!r}, () => {{ throw error; }});
}}
test({last!r}, () => {{ expect({last_message!r}).toBe("not " + {last_message!r}); }});
"""
# The rig's config: the project's (a function of vite's env or an object), with what selects,
# stops or measures tests replaced.
CONFIG = """// Written by the rig: the project's vitest config, with the hidden run's selection.
{load}
export default async (env) => {{
  const loaded = typeof base === "function" ? await base(env) : await base;
  const config = {{ ...(loaded ?? {{}}) }};
  const test = {{ ...(config.test ?? {{}}) }};
  delete test.projects;
  delete test.workspace;
  test.include = {include};
  test.exclude = ["**/node_modules/**"];
  test.coverage = {{ ...(test.coverage ?? {{}}), enabled: false }};
  test.typecheck = {{ ...(test.typecheck ?? {{}}), enabled: false }};
  test.bail = 0;
  test.retry = 0;
  test.allowOnly = false;
  test.passWithNoTests = false;
  test.watch = false;
  config.test = test;
  return config;
}};
"""
# Where vitest looks for its config, in its order, then vite's.
PROJECT_CONFIGS = tuple(
    f"{stem}.config.{ext}" for stem in ("vitest", "vite") for ext in ("ts", "mts", "cts", "js", "mjs", "cjs")
)
# vitest's workspace file (vitest 3.2 moved its projects to test.projects): inline projects hold
# a `test` each.
WORKSPACES = tuple(f"vitest.workspace.{ext}" for ext in ("ts", "mts", "cts", "js", "mjs", "cjs", "json"))
DEFAULT_INCLUDE = ("**/*.{test,spec}.?(c|m)[jt]s?(x)",)
# vitest's default include as a file-name pattern.
_COLLECTED = re.compile(r"^.+\.(test|spec)\.[cm]?[jt]sx?$")
_PROGRAM = "vitest"
_SCRIPT = "vitest.mjs"
_RUN_WORDS = frozenset({"run", "watch", "dev", "related"})


def setup(hidden: Hidden, runner: RunnerSpec, junit: Path, env: ProjectEnv | None) -> HiddenRun:
    """The environment's vitest over one canary wrapper per hidden test file, junit to `junit`."""
    entry = runner_entry(env, _PROGRAM, _SCRIPT)
    wrapped = wrap(hidden, VITEST, WRAPPER)
    tree = hidden.tree
    modules = {wrapper.relative_to(tree).as_posix(): module for wrapper, module in wrapped.modules.items()}
    project = next((name for name in PROJECT_CONFIGS if (tree / name).is_file()), None)
    load = (
        f'import * as project from "../{project}";\nconst base = project.default ?? {{}};'
        if project is not None
        else "const base = {};"
    )
    # In the rig's folder, one level below the tree's root, where it imports the project's config.
    config = hidden.folder / f"rig-{token()}.vitest.config.mjs"
    config.write_text(CONFIG.format(load=load, include=json.dumps(sorted(modules))))
    command = [
        node_binary(),
        str(entry),
        "run",
        "--config",
        str(config),
        "--reporter=junit",
        f"--outputFile={junit}",
        "--coverage.enabled=false",
    ]
    return HiddenRun(
        command, Canaries(wrapped.canaries), lambda report: named_cases(report, modules), "vitest"
    )


def runs_tests(argv: list[str]) -> bool:
    """vitest itself (`vitest`, `vitest run`), or node running its script."""
    program = posixpath.basename(argv[0])
    if program == _PROGRAM:
        return len(argv) == 1 or argv[1].startswith("-") or argv[1] in _RUN_WORDS
    if program not in NODE:
        return False
    script = node_target(argv[1:])[1]
    return script is not None and posixpath.basename(script) in (_SCRIPT, _PROGRAM)


def collects(path: PurePosixPath) -> bool:
    """Whether vitest's default include would run the file at `path`."""
    return "node_modules" not in path.parts and bool(_COLLECTED.match(path.name))


def detect(project: Project) -> Detection | None:
    """A package.json that depends on vitest or runs it as its test script, or a vitest config."""
    if "package.json" not in project.files:
        return None
    configs = [name for name in PROJECT_CONFIGS if name in project.files and name.startswith(_PROGRAM)]
    evidence = depends_on(project, _PROGRAM) or (configs[0] if configs else None)
    if evidence is None:
        return None
    return Detection(evidence, tuple(name for name in PROJECT_CONFIGS if name in project.files))


def project_test_files(project: Project) -> list[TestGlob]:
    """`test.include` of the project's vitest config (the one its test script names, else the
    first vitest and vite config found) and of the inline projects of its workspace file, with
    `test.exclude` as excluding globs (spreads such as configDefaults.exclude left out); vitest's
    default include where they name none or compute it."""
    config = named_config(project, _PROGRAM) or next((n for n in PROJECT_CONFIGS if n in project.files), None)
    workspace = next((name for name in WORKSPACES if name in project.files), None)
    configs = [name for name in (config, workspace) if name is not None]
    found: list[TestGlob] = []
    computed: list[str] = []
    for name in configs:
        for test in values_of(project.read(name) or "", "test"):
            if not isinstance(test, dict):
                continue
            include = strings(test.get("include", []))
            if include is None:
                computed.append(f"{name} test.include")
            found += [TestGlob(glob, f"{name} test.include") for glob in include or []]
            exclude = string_items(test.get("exclude", []))
            found += [TestGlob(NEGATE + glob, f"{name} test.exclude") for glob in exclude]
    reason = f"no test.include in {', '.join(configs)}" if configs else "no vitest or vite config"
    return or_default(found, DEFAULT_INCLUDE, "vitest's default include", reason, computed)


def placeholder(message: str) -> Placeholder:
    """A test file whose one test, in the describe() named after its stem, fails with `message`."""
    content = (
        "// Hidden tests of the example task: a placeholder that fails until it is replaced.\n"
        "// A test's id is <file stem>::<describe > test>, the describe named after the stem left out.\n"
        'import { describe, test } from "vitest";\n\n'
        'describe("example_hidden", () => {\n'
        '  test("placeholder", () => {\n'
        f"    throw new Error({json.dumps(message)});\n"
        "  });\n"
        "});\n"
    )
    return Placeholder("example_hidden.test.ts", content, "example_hidden::placeholder")


VITEST = Kind(
    language="typescript",
    protected_names=(
        *PACKAGE_FILES,
        # How vitest and its transforms read the tests: the config the hidden run extends.
        "vitest.config.*",
        "vite.config.*",
        "vitest.workspace.*",
        "tsconfig*.json",
        "babel.config.*",
        ".babelrc*",
    ),
    python=False,
    source_suffixes=tuple(f".{suffix}" for suffix in SUFFIXES),
    test_files=TEST_FILES,
    probe=re.compile(
        r"(?:\bimport\.meta\.vitest\b|\b__vitest\w*|\bVITEST\w*|\bjunit\w*|\bprocess\.reallyExit\b)"
    ),
    setup=setup,
    runs_tests=runs_tests,
    collects=collects,
    detect=detect,
    placeholder=placeholder,
    default_gate=GateGuess(
        command=["npx", "vitest", "run"], run=["vitest", "run"], source="vitest run", shadow_roots=[]
    ),
    package_test_commands=PACKAGE_TEST_COMMANDS,
    tamper_files={"vitest.config.mjs": "export default { test: { include: [], passWithNoTests: true } };\n"},
    project_test_files=project_test_files,
    passing_test=("fake.test.ts", 'import { test } from "vitest";\n\ntest("fake", () => {});\n'),
)

"""The jest runner kind: the environment's jest over one canary wrapper per hidden test file.

The project's jest configuration is honoured (its transform, such as ts-jest or babel-jest, its
test environment, module mapping and setup files): jest reads it from the tree, where it is
protected and restored before verification. What selects or stops tests and coverage is the
rig's, given on the command line, which beats the configuration: `--testMatch` names the wrappers
only, `--roots` is the tree, coverage is off (so a coverage threshold cannot fail a run of a few
tests), `--ci` writes no snapshot. The outcomes come from jest's own JSON results (`--json`), no
reporter package needed, cross-checked against its exit code.
"""

import json
import posixpath
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from rig.confine.project_env import ProjectEnv
from rig.runners.argv import NODE, node_target
from rig.runners.base import Detection, GateGuess, Kind, Placeholder, Project, TestGlob
from rig.runners.globs import NEGATE, regex_globs
from rig.runners.hidden import Hidden, HiddenRun, node_binary
from rig.runners.js import (
    PACKAGE_FILES,
    PACKAGE_TEST_COMMANDS,
    SUFFIXES,
    TEST_FILES,
    depends_on,
    named_config,
    or_default,
    package_json,
    runner_entry,
    wrap,
)
from rig.runners.jsconfig import strings, values_of
from rig.runners.junit import Canaries, Case, leaf
from rig.schema import RunnerSpec, test_glob_problem

# One wrapper per hidden file, beside it: a canary before the file is required and one after, so
# code that ends the worker at require time or forces outcomes loses one. The last one fails
# through `expect`, so matchers replaced from the code under test (`expect.extend`) show too.
# `require`, not import: jest's transforms run a test file as CommonJS. A file that fails to load
# is a failing test named after its stem.
WRAPPER = """// Written by the rig: its canaries must fail, or outcomes were forced.
test({first!r}, () => {{ throw new Error({first_message!r}); }});
try {{
  require({module!r});
}} catch (error) {{
  test({stem!r}, () => {{ throw error; }});
}}
test({last!r}, () => {{ expect({last_message!r}).toBe("not " + {last_message!r}); }});
"""
PROJECT_CONFIGS = tuple(f"jest.config.{ext}" for ext in ("ts", "mts", "cts", "js", "mjs", "cjs", "json"))
# jest's default testMatch: files in __tests__ folders, and *.test.* / *.spec.* files.
_COLLECTED = re.compile(r"^.+[.](test|spec)[.][jt]sx?$")
_COLLECTED_FOLDER = "__tests__"
_PROGRAM = "jest"
_SCRIPT = "jest.js"
_STATES = {"passed": "passed", "failed": "failed"}
# The config files jest reads the first of, in its order; else package.json's "jest".
_CONFIG_ORDER = tuple(f"jest.config.{ext}" for ext in ("js", "ts", "mjs", "cjs", "cts", "json"))
# jest's default testMatch (jest 30's; jest 29's lacks .mjs, .cjs, .mts and .cts).
DEFAULT_MATCH = ("**/__tests__/**/*.?([mc])[jt]s?(x)", "**/?(*.)+(spec|test).?([mc])[jt]s?(x)")
_ROOT_DIR = "<rootDir>"
_KEYS = ("testMatch", "testRegex", "roots", "rootDir", "projects")


def setup(hidden: Hidden, runner: RunnerSpec, junit: Path, env: ProjectEnv | None) -> HiddenRun:
    """The environment's jest over one canary wrapper per hidden test file, its JSON results to `junit`."""
    entry = runner_entry(env, _PROGRAM, "bin", _SCRIPT)
    wrapped = wrap(hidden, JEST, WRAPPER)
    tree = hidden.tree
    modules = {str(wrapper): module for wrapper, module in wrapped.modules.items()}
    matches = [arg for wrapper in sorted(modules) for arg in ("--testMatch", wrapper)]
    command = [
        node_binary(),
        str(entry),
        "--ci",
        "--json",
        f"--outputFile={junit}",
        "--coverage=false",
        "--bail=0",
        "--no-watchman",
        "--roots",
        str(tree),
        "--testPathIgnorePatterns",
        "/node_modules/",
        *matches,
    ]
    return HiddenRun(command, Canaries(wrapped.canaries), lambda report: json_cases(report, modules), "jest")


def json_cases(report: Path, modules: Mapping[str, str]) -> list[Case]:
    """Every test of jest's JSON results: the module is `modules`' name for the file that ran it,
    the name its ancestors' titles and its own joined by " > ", a first describe named after the
    module left out. A file that failed before any test ran is one failing case named after it.
    Raises ValueError for a report that is not jest's JSON."""
    data = json.loads(report.read_bytes())
    if not isinstance(data, dict) or not isinstance(data.get("testResults"), list):
        raise ValueError("no testResults")
    cases = []
    for result in data["testResults"]:
        module = modules.get(str(result.get("name", "")), str(result.get("name", "")))
        assertions = result.get("assertionResults") or []
        if not assertions and result.get("status") == "failed":
            cases.append(Case(module, module, "failed", str(result.get("message", ""))))
        for test in assertions:
            titles = [str(t) for t in test.get("ancestorTitles", [])]
            if titles and titles[0] == leaf(module):
                titles = titles[1:]
            name = " > ".join([*titles, str(test.get("title", ""))])
            state = _STATES.get(str(test.get("status")), "skipped")
            message = " ".join(str(m) for m in test.get("failureMessages", []))
            cases.append(Case(module, name, state, message))
    return cases


def runs_tests(argv: list[str]) -> bool:
    """jest itself, or node running its bin script."""
    program = posixpath.basename(argv[0])
    if program == _PROGRAM:
        return "--init" not in argv[1:]
    if program not in NODE:
        return False
    script = node_target(argv[1:])[1]
    return script is not None and (
        posixpath.basename(script) == _PROGRAM or script.endswith(f"{_PROGRAM}/bin/{_SCRIPT}")
    )


def collects(path: PurePosixPath) -> bool:
    """Whether jest's default testMatch would run the file at `path`."""
    if "node_modules" in path.parts or path.suffix.lstrip(".") not in ("js", "jsx", "ts", "tsx"):
        return False
    return _COLLECTED_FOLDER in path.parts[:-1] or bool(_COLLECTED.match(path.name))


def detect(project: Project) -> Detection | None:
    """A package.json that depends on jest, configures it or runs it as its test script, or a jest config."""
    if "package.json" not in project.files:
        return None
    configs = tuple(name for name in PROJECT_CONFIGS if name in project.files)
    evidence = depends_on(project, _PROGRAM)
    if evidence is None and isinstance(package_json(project).get(_PROGRAM), dict):
        evidence = 'package.json "jest"'
    if evidence is None and configs:
        evidence = configs[0]
    return None if evidence is None else Detection(evidence, configs)


def _config(project: Project) -> tuple[str, dict[str, object]]:
    """Where jest's configuration is (the file the test script names, the first of jest's, or
    package.json's "jest"; "" for none) and the keys that say which files are tests."""
    name = named_config(project, _PROGRAM) or next((n for n in _CONFIG_ORDER if n in project.files), None)
    if name is not None:
        text = project.read(name) or ""
        return name, {key: found[0] for key in _KEYS if (found := values_of(text, key))}
    config = package_json(project).get(_PROGRAM)
    if not isinstance(config, dict):
        return "", {}
    return 'package.json "jest"', {key: config[key] for key in _KEYS if key in config}


def _rooted(glob: str, root_dir: str, root: str) -> str:
    """A testMatch glob, which jest matches against absolute paths, relative to the fixture root:
    `<rootDir>/x` is x below rootDir, `**/x` is x below the root searched, and so is a glob
    written relative (which jest would match nowhere)."""
    negate = NEGATE if glob.startswith(NEGATE) else ""
    body = glob.removeprefix(negate)
    if body.startswith(_ROOT_DIR):
        return negate + posixpath.join(root_dir, body.removeprefix(_ROOT_DIR).lstrip("/"))
    body = body if body.startswith("**") else f"**/{body}"
    return negate + (f"{root}/{body}" if root else body)


def _under(root_dir: str, root: str) -> str:
    """A root (`<rootDir>/src`, `src`) relative to the fixture root, "" for the root itself."""
    path = posixpath.normpath(posixpath.join(root_dir, root.removeprefix(_ROOT_DIR).lstrip("/")))
    return "" if path == "." else path


def _literal(key: str, value: object) -> bool:
    """Whether a key of jest's configuration holds what rig reads: rootDir a string, the others
    a string or a list of strings."""
    return isinstance(value, str) if key == "rootDir" else strings(value) is not None


def project_test_files(project: Project) -> list[TestGlob]:
    """The files jest runs as tests, as globs: its testMatch, or its testRegex where globs can say
    it, below each of its roots (from its rootDir); its default testMatch when it names neither,
    when a value is computed, when it has projects, or when a testRegex is no glob."""
    label, config = _config(project)
    computed = [
        f"{label} {key}" for key, value in config.items() if key != "projects" and not _literal(key, value)
    ]
    given = config.get("rootDir", _ROOT_DIR)
    root_dir = _under("", given) if isinstance(given, str) else ""
    roots = strings(config.get("roots", [_ROOT_DIR])) or [_ROOT_DIR]
    prefixes = list(dict.fromkeys(_under(root_dir, root) for root in roots))
    where = f" (roots: {', '.join(prefixes)})" if prefixes != [""] else ""
    reason = f"no testMatch or testRegex in {label}" if label else "no jest config"
    found: list[TestGlob] = []
    if "projects" in config:
        reason = f"{label} has projects, which rig does not read"
    elif "testRegex" in config and not computed:
        for regex in strings(config["testRegex"]) or []:
            globs = regex_globs(regex)
            if globs is None:
                reason, found = f"{label} testRegex {regex} says more than globs can", []
                break
            source = f"{label} testRegex {regex}{where}"
            found += [TestGlob(_rooted(glob, root_dir, p), source) for glob in globs for p in prefixes]
    elif "testMatch" in config and not computed:
        source = f"{label} testMatch{where}"
        found = [
            TestGlob(_rooted(g, root_dir, p), source)
            for g in strings(config["testMatch"]) or []
            for p in prefixes
        ]
    # A root outside the fixture names nothing rig can match: the default is looked for in the fixture.
    inside = [p for p in prefixes if not p or test_glob_problem(p) is None] or [""]
    default = tuple(dict.fromkeys(_rooted(g, root_dir, p) for g in DEFAULT_MATCH for p in inside))
    return or_default(found, default, f"jest's default testMatch{where}", reason, computed)


def placeholder(message: str) -> Placeholder:
    """A test file whose one test, in the describe() named after its stem, fails with `message`."""
    content = (
        "// Hidden tests of the example task: a placeholder that fails until it is replaced.\n"
        "// A test's id is <file stem>::<describe > test>, the describe named after the stem left out.\n"
        'describe("example_hidden", () => {\n'
        '  test("placeholder", () => {\n'
        f"    throw new Error({json.dumps(message)});\n"
        "  });\n"
        "});\n"
    )
    return Placeholder("example_hidden.test.js", content, "example_hidden::placeholder")


JEST = Kind(
    language="javascript",
    protected_names=(
        *PACKAGE_FILES,
        # How jest and its transforms read the tests.
        "jest.config.*",
        "jest.setup.*",
        "tsconfig*.json",
        "babel.config.*",
        ".babelrc*",
    ),
    python=False,
    source_suffixes=tuple(f".{suffix}" for suffix in SUFFIXES),
    test_files=TEST_FILES,
    probe=re.compile(r"(?:\bJEST_WORKER_ID\b|\b__jest\w*|\bprocess\.reallyExit\b)"),
    setup=setup,
    runs_tests=runs_tests,
    collects=collects,
    detect=detect,
    placeholder=placeholder,
    default_gate=GateGuess(command=["npx", "jest"], run=["jest", "--ci"], source="jest", shadow_roots=[]),
    package_test_commands=PACKAGE_TEST_COMMANDS,
    tamper_files={"jest.config.js": "module.exports = { testMatch: [], passWithNoTests: true };\n"},
    project_test_files=project_test_files,
    passing_test=("fake.test.js", 'test("fake", () => {});\n'),
)

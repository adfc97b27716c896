"""The mocha runner kind: the environment's mocha over one canary wrapper per hidden test file.

The project's mocha configuration (`.mocharc.*` or package.json's "mocha": its ui, require hooks
such as ts-node, timeout, extensions) is honoured through a config the rig writes, which loads it
with mocha's own loader and drops what selects or stops tests (spec, grep, bail, retries,
parallel, watch, only) and the reporter; the rig's selection and mocha's JSON reporter are given
on the command line. Outcomes come from that JSON, cross-checked against mocha's exit code, which
is its number of failures.
"""

import json
import posixpath
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

import yaml

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
    is_module,
    named_config,
    or_default,
    package_json,
    runner_entry,
    test_script_args,
    wrap,
)
from rig.runners.jsconfig import string_items, strings, values_of
from rig.runners.junit import Canaries, Case, leaf
from rig.schema import RunnerSpec

# One wrapper per hidden file, beside it: a canary before the file is loaded and one after, so
# code that ends the process at load time or forces outcomes loses one. A file that fails to
# load is a failing test named after its stem. The code under test shares mocha's process and its
# node:assert, a plain mutable object: the wrapper freezes it first (as node-test's does), so
# `assert.equal = () => {}` from the code under test does nothing, and the last canary fails
# through it. A CommonJS test file is required by a CommonJS wrapper (`.cjs`, whatever the
# package's type), an ES module imported by an ES module wrapper (`.mjs`, mocha awaits its
# top-level await): either registers the file's tests between the canaries.
WRAPPER = """// Written by the rig: its canaries must fail, or outcomes were forced.
const rigAssert = require("node:assert");
for (const shared of [rigAssert, rigAssert.strict]) Object.freeze(shared);
it({first!r}, () => {{ throw new Error({first_message!r}); }});
try {{
  require({module!r});
}} catch (error) {{
  it({stem!r}, () => {{ throw error; }});
}}
it({last!r}, () => {{ rigAssert.strictEqual({last_message!r}, "not " + {last_message!r}); }});
"""
MODULE_WRAPPER = """// Written by the rig: its canaries must fail, or outcomes were forced.
import rigAssert from "node:assert";
for (const shared of [rigAssert, rigAssert.strict]) Object.freeze(shared);
it({first!r}, () => {{ throw new Error({first_message!r}); }});
try {{
  await import({module!r});
}} catch (error) {{
  it({stem!r}, () => {{ throw error; }});
}}
it({last!r}, () => {{ rigAssert.strictEqual({last_message!r}, "not " + {last_message!r}); }});
"""
CONFIG = """// Written by the rig: the project's mocha configuration, without what selects or stops tests.
const options = require({options!r});
const config = {{ ...(options.loadPkgRc({{}}) || {{}}), ...(options.loadRc({{}}) || {{}}) }};
for (const key of {dropped}) delete config[key];
module.exports = config;
"""
_DROPPED = (
    "spec",
    "file",
    "ignore",
    "exclude",
    "watch",
    "watch-files",
    "watch-ignore",
    "parallel",
    "jobs",
    "j",
    "bail",
    "b",
    "retries",
    "grep",
    "g",
    "fgrep",
    "f",
    "invert",
    "i",
    "forbid-only",
    "forbid-pending",
    "reporter",
    "R",
    "reporter-option",
    "reporter-options",
    "O",
    "config",
    "package",
    "dry-run",
    "fail-zero",
    "pass-on-failing-test-suite",
)
PROJECT_CONFIGS = tuple(f".mocharc.{ext}" for ext in ("js", "cjs", "mjs", "yaml", "yml", "json", "jsonc"))
_PROGRAM = "mocha"
_SCRIPT = "mocha.js"
# What mocha runs with no spec: ./test/*.{js,cjs,mjs}.
_DEFAULT_FOLDER = "test"
_DEFAULT_EXTENSIONS = ("js", "cjs", "mjs")
_MAX_EXIT = 255
# The config files mocha reads the first of, in its order.
_RC_ORDER = (
    ".mocharc.cjs",
    ".mocharc.js",
    ".mocharc.yaml",
    ".mocharc.yml",
    ".mocharc.jsonc",
    ".mocharc.json",
)
# What mocha takes as a glob rather than a file or folder (glob's hasMagic).
_MAGIC = re.compile(r"[*?[\]{}()]")
# mocha's options that take a value: every other argument that is no option is a spec.
_VALUED = frozenset(
    {
        "--config",
        "--package",
        "--extension",
        "--file",
        "--ignore",
        "--exclude",
        "--spec",
        "--require",
        "-r",
        "--reporter",
        "-R",
        "--reporter-option",
        "--reporter-options",
        "-O",
        "--ui",
        "-u",
        "--timeout",
        "-t",
        "--slow",
        "-s",
        "--grep",
        "-g",
        "--fgrep",
        "-f",
        "--jobs",
        "-j",
        "--retries",
        "--global",
        "--globals",
        "--node-option",
        "-n",
        "--watch-files",
        "--watch-ignore",
    }
)
_SPEC_KEYS = ("spec", "extension", "ignore", "exclude", "recursive")
_SPEC_OPTIONS = {"--spec": "spec", "--extension": "extension", "--ignore": "ignore", "--exclude": "ignore"}


def setup(hidden: Hidden, runner: RunnerSpec, junit: Path, env: ProjectEnv | None) -> HiddenRun:
    """The environment's mocha over one canary wrapper per hidden test file, its JSON results to `junit`."""
    entry = runner_entry(env, _PROGRAM, "bin", _SCRIPT)
    wrapped = wrap(
        hidden,
        MOCHA,
        lambda path: (
            (MODULE_WRAPPER, ".test.mjs") if is_module(path, hidden.tree) else (WRAPPER, ".test.cjs")
        ),
    )
    modules = {str(wrapper): module for wrapper, module in wrapped.modules.items()}
    config = hidden.folder / f"rig-{token()}.mocharc.cjs"
    options = entry.parent.parent / "lib" / "cli" / "options.js"
    config.write_text(CONFIG.format(options=str(options), dropped=json.dumps(list(_DROPPED))))
    command = [
        node_binary(),
        str(entry),
        "--config",
        str(config),
        "--no-package",
        "--reporter",
        "json",
        "--reporter-option",
        f"output={junit}",
        "--retries",
        "0",
        "--forbid-only",
        *sorted(modules),
    ]
    return HiddenRun(
        command,
        Canaries(wrapped.canaries),
        lambda report: json_cases(report, modules),
        "mocha",
        failed_exit=lambda cases: min(_MAX_EXIT, sum(case.state == "failed" for case in cases)),
    )


def json_cases(report: Path, modules: Mapping[str, str]) -> list[Case]:
    """Every test of mocha's JSON report: the module is `modules`' name for its file, the name its
    full title with a first describe named after the module left out. Raises ValueError for a
    report that is not mocha's JSON."""
    data = json.loads(report.read_bytes())
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("passes", "failures")):
        raise ValueError("no passes or failures")
    cases = []
    for state, key in (("passed", "passes"), ("failed", "failures"), ("skipped", "pending")):
        for test in data.get(key) or []:
            module = modules.get(str(test.get("file", "")), str(test.get("file", "")))
            name = str(test.get("fullTitle", test.get("title", "")))
            # mocha joins the titles with spaces: a first describe named after the module is its prefix.
            name = name.removeprefix(f"{leaf(module)} ")
            error = test.get("err") or {}
            message = (
                f"{error.get('message', '')} {error.get('stack', '')}" if isinstance(error, dict) else ""
            )
            cases.append(Case(module, name, state, message))
    return cases


def runs_tests(argv: list[str]) -> bool:
    """mocha itself, or node running its bin script."""
    program = posixpath.basename(argv[0])
    if program in (_PROGRAM, "_mocha"):
        return "init" not in argv[1:2]
    if program not in NODE:
        return False
    script = node_target(argv[1:])[1]
    return script is not None and (
        posixpath.basename(script) in (_PROGRAM, "_mocha") or script.endswith(f"{_PROGRAM}/bin/{_SCRIPT}")
    )


def collects(path: PurePosixPath) -> bool:
    """Whether mocha with no spec would run the file at `path`: ./test/*.{js,cjs,mjs}."""
    return path.parts[:-1] == (_DEFAULT_FOLDER,) and path.suffix in (".js", ".cjs", ".mjs")


def detect(project: Project) -> Detection | None:
    """A package.json that depends on mocha, configures it or runs it as its test script, or a .mocharc."""
    if "package.json" not in project.files:
        return None
    configs = tuple(name for name in PROJECT_CONFIGS if name in project.files)
    evidence = depends_on(project, _PROGRAM)
    if evidence is None and configs:
        evidence = configs[0]
    return None if evidence is None else Detection(evidence, configs)


def _rc_options(project: Project, name: str) -> dict[str, object]:
    """The options of a .mocharc file that say which files are specs."""
    text = project.read(name) or ""
    if name.endswith((".yaml", ".yml")):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            return {}
        return data if isinstance(data, dict) else {}
    return {key: found[0] for key in _SPEC_KEYS if (found := values_of(text, key))}


def _script_options(args: list[str]) -> dict[str, object]:
    """The options of a mocha command line that say which files are specs."""
    options: dict[str, list[str]] = {"spec": [], "extension": [], "ignore": []}
    recursive = False
    at = 0
    while at < len(args):
        arg = args[at]
        at += 1
        if arg == "--":
            options["spec"] += args[at:]
            break
        if not arg.startswith("-"):
            options["spec"].append(arg)
            continue
        name, joined, value = arg.partition("=")
        if name in _VALUED and not joined:
            value = args[at] if at < len(args) else ""
            at += 1
        if name in _SPEC_OPTIONS:
            options[_SPEC_OPTIONS[name]] += value.split(",") if name == "--extension" else [value]
        recursive = recursive or name == "--recursive"
    return {**options, "recursive": recursive}


def _spec_glob(spec: str, files: list[str], extensions: list[str], recursive: bool) -> str:
    """A mocha spec as a glob: a glob as it is, a file, a folder's files with the extensions
    (below it too when recursive), or a path mocha completes with one of them."""
    path = spec.removeprefix("./").rstrip("/")
    if _MAGIC.search(path) or path in files:
        return path
    suffix = extensions[0] if len(extensions) == 1 else "{" + ",".join(extensions) + "}"
    if path in ("", ".") or any(f.startswith(f"{path}/") for f in files):
        folder = "" if path in ("", ".") else f"{path}/"
        return f"{folder}{'**/' if recursive else ''}*.{suffix}"
    return f"{path}.{suffix}"


def project_test_files(project: Project) -> list[TestGlob]:
    """The specs mocha runs, as globs: those of its config file (the one the test script names,
    else the first of mocha's), of package.json's "mocha" and of the test script's mocha command
    line, all of them, as mocha joins them; its default ./test when none names any. A spec that
    only running the config would give means the default, said so."""
    rc = named_config(project, _PROGRAM) or next((name for name in _RC_ORDER if name in project.files), None)
    script = project.scripts.get("test", "")
    args = test_script_args(project, _PROGRAM) or test_script_args(project, f"_{_PROGRAM}")
    package = package_json(project).get(_PROGRAM)
    # Each source, and whether its comments name the key (the test script's shows its words).
    sources = [
        (str(rc), True, _rc_options(project, rc) if rc else {}),
        ('package.json "mocha"', True, package if isinstance(package, dict) else {}),
        (f'package.json "test": "{script}"', False, _script_options(args or [])),
    ]
    extensions = [
        ext.lstrip(".") for _, _, options in sources for ext in string_items(options.get("extension", []))
    ] or list(_DEFAULT_EXTENSIONS)
    recursive = any(options.get("recursive") is True for _, _, options in sources)
    found: list[TestGlob] = []
    computed = []
    for where, keyed, options in sources:
        specs = strings(options.get("spec", []))
        if specs is None:
            computed.append(f"{where} spec")
        source = f"{where} spec" if keyed else where
        found += [
            TestGlob(_spec_glob(spec, project.files, extensions, recursive), source) for spec in specs or []
        ]
        for key in ("ignore", "exclude"):
            source = f"{where} {key}" if keyed else where
            found += [
                TestGlob(NEGATE + glob.removeprefix("./"), source)
                for glob in string_items(options.get(key, []))
            ]
    default = (_spec_glob(_DEFAULT_FOLDER, project.files, extensions, recursive),)
    reason = "no spec in a .mocharc, package.json or the test script"
    return or_default(found, default, "mocha's default spec ./test", reason, computed)


def placeholder(message: str) -> Placeholder:
    """A test file whose one test, in the describe() named after its stem, fails with `message`."""
    content = (
        "// Hidden tests of the example task: a placeholder that fails until it is replaced.\n"
        "// A test's id is <file stem>::<full title>, the describe named after the stem left out.\n"
        'describe("example_hidden", () => {\n'
        '  it("placeholder", () => {\n'
        f"    throw new Error({json.dumps(message)});\n"
        "  });\n"
        "});\n"
    )
    return Placeholder("example_hidden.test.js", content, "example_hidden::placeholder")


MOCHA = Kind(
    language="javascript",
    protected_names=(
        *PACKAGE_FILES,
        # How mocha and its require hooks read the tests.
        ".mocharc*",
        "tsconfig*.json",
        "babel.config.*",
        ".babelrc*",
    ),
    python=False,
    source_suffixes=tuple(f".{suffix}" for suffix in SUFFIXES),
    test_files=TEST_FILES,
    probe=re.compile(r"(?:\bMOCHA_\w*|\b__mocha\w*|\bprocess\.reallyExit\b)"),
    setup=setup,
    runs_tests=runs_tests,
    collects=collects,
    detect=detect,
    placeholder=placeholder,
    default_gate=GateGuess(command=["npx", "mocha"], run=["mocha"], source="mocha", shadow_roots=[]),
    package_test_commands=PACKAGE_TEST_COMMANDS,
    tamper_files={".mocharc.json": '{ "spec": [], "allow-uncaught": true }\n'},
    project_test_files=project_test_files,
    passing_test=("fake.test.js", 'it("fake", () => {});\n'),
)

"""The project's test files, `[runner] test_files`: the glob dialect, the runner configurations
`rig pack new` reads them from (inline configs, never run), its pack.toml, and mining a real
mocha history whose tests are named like any other file (test/clamp.js), whose hidden test then
runs while a helper beside it does not."""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from mine_repos import git, mocha_repo
from node_packs import DATA, hidden_run

from harnesses.scripted.adapter import tamper_plan
from rig.mine.history import Skip, history, split
from rig.packs.manifest import PackError, load_pack
from rig.runners.base import Project
from rig.runners.globs import compile_glob, glob_set, regex_globs
from rig.runners.mocha import MOCHA
from rig.runners.registry import KINDS

RIG = str(Path(sys.executable).with_name("rig"))


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("test/**/*.test.ts", "test/a.test.ts", True),
        ("test/**/*.test.ts", "test/x/y/a.test.ts", True),
        ("test/**/*.test.ts", "src/a.test.ts", False),
        ("test/*.{js,cjs,mjs}", "test/a.cjs", True),
        ("test/*.{js,cjs,mjs}", "test/deep/a.js", False),
        ("**/__tests__/**/*.?([mc])[jt]s?(x)", "__tests__/a.ts", True),
        ("**/__tests__/**/*.?([mc])[jt]s?(x)", "src/__tests__/b/c.mjs", True),
        ("**/__tests__/**/*.?([mc])[jt]s?(x)", "src/a.ts", False),
        ("**/?(*.)+(spec|test).?([mc])[jt]s?(x)", "test.js", True),
        ("**/?(*.)+(spec|test).?([mc])[jt]s?(x)", "src/a.b.spec.cts", True),
        ("**/?(*.)+(spec|test).?([mc])[jt]s?(x)", "src/attest.js", False),
        ("**/*.{test,spec}.?(c|m)[jt]s?(x)", "a.test.tsx", True),
        ("**/*.{test,spec}.?(c|m)[jt]s?(x)", "a.tests.ts", False),
        ("src/[!_]*.js", "src/_private.js", False),
        ("test/**", "test/fixtures/data.json", True),
        ("a{b", "a{b", True),
    ],
)
def test_the_glob_dialect(glob: str, path: str, matches: bool) -> None:
    assert bool(compile_glob(glob).fullmatch(path)) is matches


def test_excluding_globs_and_the_kind_default_without_globs() -> None:
    globs = ("test/**/*.js", "!test/fixtures/**")
    assert glob_set(globs).matches("test/a.js") and not glob_set(globs).matches("test/fixtures/a.js")
    assert MOCHA.is_test("test/clamp.js", ["test/*.js"]) and not MOCHA.is_test("test/clamp.js", [])
    assert MOCHA.is_test("src/clamp.test.js", []) and not MOCHA.is_test("src/clamp.test.js", ["test/*.js"])


def write_pack(root: Path, runner: str, files: dict[str, str] | None = None) -> Path:
    for folder in ("fixture", "tasks", "hidden_tests"):
        (root / folder).mkdir(parents=True)
    for rel, text in (files or {}).items():
        (root / "fixture" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "fixture" / rel).write_text(text)
    gate = '[gate]\ncommand = ["true"]\nrun = ["true"]\n'
    (root / "pack.toml").write_text(f'name = "p"\n{gate}[protect]\ndirs = ["test"]\n[runner]\n{runner}\n')
    return root


@pytest.mark.parametrize(
    ("globs", "message"),
    [
        ('["/abs/*.js"]', "'/abs/*.js' is absolute: write it relative to the fixture root"),
        ('["test/../../x.js"]', "'test/../../x.js' leaves the fixture: write it relative"),
        ('["!test/*.js"]', "every glob starts with '!': add one that says which files are tests"),
        ('["test/!(a).js"]', "holds !(...), which rig does not match: exclude with a second glob"),
        ('[""]', "'' is empty: write a glob such as test/**/*.test.js"),
    ],
)
def test_bad_test_files_are_one_line_naming_the_fix(tmp_path: Path, globs: str, message: str) -> None:
    with pytest.raises(PackError) as caught:
        load_pack(write_pack(tmp_path, f'kind = "mocha"\ntest_files = {globs}'))
    assert "\n" not in str(caught.value) and "runner.test_files" in str(caught.value)
    assert message in str(caught.value) and str(caught.value).endswith("fix the manifest")


def test_test_files_decide_the_tamper_policys_victim(tmp_path: Path) -> None:
    files = {"test/a_helper.js": "", "test/b.check.js": ""}
    by_kind = load_pack(write_pack(tmp_path / "kind", 'kind = "mocha"', files))
    by_globs = load_pack(
        write_pack(tmp_path / "globs", 'kind = "mocha"\ntest_files = ["./test/*.check.js"]', files)
    )
    assert by_globs.spec.runner.test_files == ["test/*.check.js"]
    assert {"delete": "test/a_helper.js"} in tamper_plan(by_kind)
    assert {"delete": "test/b.check.js"} in tamper_plan(by_globs)


def read(kind: str, files: dict[str, str], test_script: str = "") -> list[tuple[str, str]]:
    """What the kind reads of a project holding `files` (package.json always), as (glob, source)."""
    files = {"package.json": "{}", **files}
    project = Project(list(files), {"test": test_script} if test_script else {}, files.get)
    reader = KINDS[kind].project_test_files
    assert reader is not None
    return [(glob.glob, glob.source) for glob in reader(project)]


VITEST_TS = """/// <reference types="vitest" />
import { defineConfig, configDefaults } from "vitest/config";
const alias = /^~\\/{1}/; // a regular expression with a brace, a comment with one: {
export default defineConfig(({ mode }) => ({
  resolve: { alias: [{ find: alias, replacement: `${process.cwd()}/src` }] },
  test: {
    include: ["test/**/*.test.ts", 'src/**/*.spec.{ts,tsx}'] as const,
    exclude: [...configDefaults.exclude, "test/fixtures/**"],
    coverage: { include: ["src/**"] },
    environment: mode === "dom" ? "jsdom" : "node",
  },
}));
"""
DEFAULT_INCLUDE = "**/*.{test,spec}.?(c|m)[jt]s?(x)"
JEST_DEFAULT = ["**/__tests__/**/*.?([mc])[jt]s?(x)", "**/?(*.)+(spec|test).?([mc])[jt]s?(x)"]


def test_vitest_reads_test_include_and_exclude() -> None:
    assert read("vitest", {"vitest.config.ts": VITEST_TS}) == [
        ("test/**/*.test.ts", "vitest.config.ts test.include"),
        ("src/**/*.spec.{ts,tsx}", "vitest.config.ts test.include"),
        ("!test/fixtures/**", "vitest.config.ts test.exclude"),
    ]
    workspace = '[{ "test": { "include": ["packages/a/**/*.test.ts"] } }, "packages/*"]'
    assert read("vitest", {"vitest.workspace.json": workspace}) == [
        ("packages/a/**/*.test.ts", "vitest.workspace.json test.include")
    ]


def test_vitest_falls_back_to_its_default_include_saying_why() -> None:
    computed = "export default { test: { include: process.env.CI ? ['a/**'] : ['b/**'] } };\n"
    assert read("vitest", {"vite.config.mjs": computed}) == [
        (
            DEFAULT_INCLUDE,
            "vitest's default include: vite.config.mjs test.include is computed, which only running the "
            "config would tell",
        )
    ]
    assert read("vitest", {}) == [(DEFAULT_INCLUDE, "vitest's default include: no vitest or vite config")]
    outside = "export default { test: { include: ['../shared/**/*.test.ts'] } };\n"
    assert read("vitest", {"vitest.config.js": outside}) == [
        (
            DEFAULT_INCLUDE,
            "vitest's default include: vitest.config.js test.include names '../shared/**/*.test.ts', "
            "which leaves the fixture",
        )
    ]


def test_jest_reads_test_match_roots_and_test_regex() -> None:
    package = json.dumps({"jest": {"testMatch": ["<rootDir>/test/**/*.test.js"], "verbose": True}})
    assert read("jest", {"package.json": package}) == [("test/**/*.test.js", 'package.json "jest" testMatch')]
    roots = (
        "const config: Config = { preset: 'ts-jest', roots: ['<rootDir>/src'] };\nexport default config;\n"
    )
    assert read("jest", {"jest.config.ts": roots}) == [
        ("src/" + glob, "jest's default testMatch (roots: src): no testMatch or testRegex in jest.config.ts")
        for glob in JEST_DEFAULT
    ]
    regex = r"module.exports = { testRegex: '/test/.*\\.spec\\.[jt]sx?$' };"
    assert read("jest", {"jest.config.js": regex}) == [
        ("**/test/**/*.spec.[jt]s?(x)", r"jest.config.js testRegex /test/.*\.spec\.[jt]sx?$")
    ]


def test_jest_says_when_a_test_regex_is_no_glob() -> None:
    lookbehind = r"module.exports = { testRegex: '(?<!e2e)\\.test\\.ts$' };"
    assert read("jest", {"jest.config.js": lookbehind}) == [
        (
            glob,
            r"jest's default testMatch: jest.config.js testRegex (?<!e2e)\.test\.ts$"
            + " says more than globs can",
        )
        for glob in JEST_DEFAULT
    ]
    assert regex_globs(r"(/__tests__/.*|(\.|/)(test|spec))\.[mc]?[jt]sx?$") == [
        "**/__tests__/**/*.?([mc])[jt]s?(x)",
        "**/*.@(test|spec).?([mc])[jt]s?(x)",
        "**/@(test|spec).?([mc])[jt]s?(x)",
    ]
    for regex in (r"\.test\.ts", r"foo.*\.ts$", r"^src/.*\.ts$", r"\.test\.ts{2}$", r"a\b\.ts$"):
        assert regex_globs(regex) is None, regex


MOCHA_FILES = {"test/app.js": "", "test/acceptance/auth.js": "", "test/support/env.js": ""}


def test_pytest_reads_testpaths_and_python_files_from_the_file_it_would_read() -> None:
    # python-slugify names its one test module as its testpaths; the kind's names never match it.
    slugify = '[tool.pytest.ini_options]\ntestpaths = ["test.py"]\naddopts = "--color=yes"\n'
    assert read("pytest", {"pyproject.toml": slugify, "test.py": ""}) == [
        ("test.py", "pyproject.toml testpaths")
    ]
    tox = "[tox]\nenvlist = py\n\n[pytest]\ntestpaths = tests ./docs/\npython_files = check_*.py\n"
    assert read("pytest", {"tox.ini": tox}) == [
        ("tests/**/check_*.py", "tox.ini testpaths and python_files"),
        ("docs/**/check_*.py", "tox.ini testpaths and python_files"),
    ]
    # pytest reads pytest.ini before setup.cfg, whatever setup.cfg says.
    both = {
        "pytest.ini": "[pytest]\npython_files = *_spec.py\n",
        "setup.cfg": "[tool:pytest]\ntestpaths = t\n",
    }
    assert read("pytest", both) == [("**/*_spec.py", "pytest.ini python_files")]
    # Neither set, or no configuration: the kind's own names are pytest's defaults.
    assert read("pytest", {"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-q'\n"}) == []
    assert read("pytest", {}) == []


def test_mocha_reads_its_config_package_json_and_test_script() -> None:
    script = "nyc mocha --require test/support/env --reporter spec --check-leaks test/ test/acceptance/"
    assert read("mocha", MOCHA_FILES, script) == [
        ("test/*.{js,cjs,mjs}", f'package.json "test": "{script}"'),
        ("test/acceptance/*.{js,cjs,mjs}", f'package.json "test": "{script}"'),
    ]
    yml = "spec:\n  - './test/**/*.spec.ts'\nextension: [ts]\nignore: ['test/fixtures/**']\n"
    assert read("mocha", {".mocharc.yml": yml}, "mocha") == [
        ("test/**/*.spec.ts", ".mocharc.yml spec"),
        ("!test/fixtures/**", ".mocharc.yml ignore"),
    ]
    jsonc = '{\n  // the specs\n  "spec": "test/acceptance",\n  "recursive": true, "extension": ["js"],\n}\n'
    package = json.dumps({"mocha": {"spec": "test/e2e.js"}})
    files = {**MOCHA_FILES, ".mocharc.jsonc": jsonc, "package.json": package, "test/e2e.js": ""}
    # mocha joins every source's specs; a folder's files are taken at every depth when recursive.
    assert read("mocha", files, "mocha test/app.js") == [
        ("test/acceptance/**/*.js", ".mocharc.jsonc spec"),
        ("test/e2e.js", 'package.json "mocha" spec'),
        ("test/app.js", 'package.json "test": "mocha test/app.js"'),
    ]


def test_mocha_falls_back_to_its_default_spec_saying_why() -> None:
    assert read("mocha", MOCHA_FILES, "mocha") == [
        (
            "test/*.{js,cjs,mjs}",
            "mocha's default spec ./test: no spec in a .mocharc, package.json or the test script",
        )
    ]
    computed = "module.exports = { spec: process.env.SPEC || 'test', recursive: true };\n"
    assert read("mocha", {**MOCHA_FILES, ".mocharc.js": computed}) == [
        (
            "test/**/*.{js,cjs,mjs}",
            "mocha's default spec ./test: .mocharc.js spec is computed, which only running the config "
            "would tell",
        )
    ]


@pytest.mark.parametrize("kind", ["vitest", "jest", "mocha"])
def test_a_config_cut_anywhere_never_stops_the_reading(kind: str) -> None:
    text = {"vitest": VITEST_TS, "jest": VITEST_TS.replace("test:", "testMatch:"), "mocha": VITEST_TS}[kind]
    name = {"vitest": "vitest.config.ts", "jest": "jest.config.ts", "mocha": ".mocharc.js"}[kind]
    for end in range(len(text)):
        assert read(kind, {name: text[:end]}), end


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # Node environments install from npm's cache alone: the tests' network is loopback.
    env = {**os.environ, "npm_config_offline": "true"}
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=600, env=env, cwd=cwd)


def test_pack_new_writes_the_globs_with_their_source(tmp_path: Path) -> None:
    repo = tmp_path / "slugs"
    files = {
        "package.json": json.dumps({"name": "slugs", "devDependencies": {"vitest": "3.2.4"}}),
        "vitest.config.ts": VITEST_TS.replace("src/**/*.spec.{ts,tsx}", "src/**/*.check.ts"),
        "src/slug.ts": "export const slug = (s: string) => s.trim();\n",
        "src/checks/slug.check.ts": "",
        "test/slug.test.ts": "",
    }
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "initial"]):
        git(repo, *args)
    done = cli("pack", "new", str(tmp_path / "pack"), "--from", str(repo), "--no-check")
    assert done.returncode == 0, done.stderr
    globs = ["test/**/*.test.ts", "src/**/*.check.ts", "!test/fixtures/**"]
    sources = "vitest.config.ts test.include; vitest.config.ts test.exclude"
    assert f"test files: {', '.join(globs)} ({sources})" in done.stdout
    written = [
        "test_files = [",
        "    # vitest.config.ts test.include",
        '    "test/**/*.test.ts",',
        '    "src/**/*.check.ts",',
        "    # vitest.config.ts test.exclude",
        '    "!test/fixtures/**",',
        "]",
    ]
    assert "\n".join(written) in (tmp_path / "pack" / "pack.toml").read_text()
    spec = load_pack(tmp_path / "pack").spec
    assert spec.runner.test_files == globs
    # A test file only the config names is protected too.
    assert "src/checks/slug.check.ts" in spec.protect.files


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """A mocha history whose tests are test/*.js, its pack (`rig pack new`; its environment is built
    offline by mining, in the tests' shared cache) and the report of `rig task mine`."""
    root = tmp_path_factory.mktemp("mocha-history")
    repo, expected = mocha_repo(root, DATA / "mocha_pack" / "fixture")
    made = cli("pack", "new", str(root / "pack"), "--from", str(repo), "--no-example", "--no-check")
    assert made.returncode == 0, made.stdout + made.stderr
    # mocha itself rather than `npm test`, which starts npm before it: the gate runs 13 times.
    manifest = root / "pack" / "pack.toml"
    manifest.write_text(manifest.read_text().replace('run = ["npm", "test"]', 'run = ["mocha"]'))
    proc = cli("task", "mine", str(repo), "--pack", str(root / "pack"), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert {entry["subject"]: entry["verdict"] for entry in report["commits"]} == expected
    return repo, root / "pack", report


def test_a_test_named_like_any_file_is_mined_by_the_packs_globs(mined: tuple[Path, Path, dict]) -> None:
    _, pack, report = mined
    spec = tomllib.loads((pack / "pack.toml").read_text())
    assert spec["runner"]["test_files"] == ["test/*.{js,cjs,mjs}"]
    (task,) = [entry for entry in report["commits"] if entry["verdict"] == "mined"]
    assert task["fail_to_pass"] == ["test/clamp::holds a value above at high"]
    assert task["pass_to_pass"] == ["test/clamp::keeps a value inside"]
    # At its own path, the test the pack's globs name; task.toml says it is the one to run.
    assert (pack / "hidden_tests" / task["task"] / "test" / "clamp.js").is_file()
    spec = tomllib.loads((pack / "tasks" / task["task"] / "task.toml").read_text())
    assert spec["hidden_at"] == "own-paths" and spec["hidden_tests"] == ["test/clamp.js"]


def test_the_hidden_test_runs_and_a_helper_beside_it_does_not(
    mined: tuple[Path, Path, dict], tmp_path: Path, offline_npm: None
) -> None:
    _, pack, report = mined
    (task,) = [entry["task"] for entry in report["commits"] if entry["verdict"] == "mined"]
    helper = {"test/values.js": 'it("values ran as a test", () => {});\nmodule.exports = [1, 2];\n'}
    outcome = hidden_run(pack, task, tmp_path / "helper", hidden=helper, at="", tests=("test/clamp.js",))
    assert outcome.ok and sorted(outcome.passed) == [
        "test/clamp::holds a value above at high",
        "test/clamp::keeps a value inside",
    ], outcome


def test_tests_globs_given_to_mine_win_over_the_packs(mined: tuple[Path, Path, dict]) -> None:
    repo, pack_dir, _ = mined
    pack = load_pack(pack_dir)
    (fix, _start) = history(repo, git(repo, "rev-parse", "HEAD").strip(), None, [], 10)
    assert split(repo, fix, pack, []).tests == ["test/clamp.js"]
    # Not a test by --tests, test/clamp.js is a change to a folder the pack protects.
    with pytest.raises(Skip, match="changes test/clamp.js, which the pack protects"):
        split(repo, fix, pack, ["spec/**"])
    assert split(repo, fix, pack, ["test/**"]).source == ["src/clamp.js"]

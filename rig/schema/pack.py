"""A pack (pack.toml) and its tasks (tasks/<id>/task.toml), and the default bounds on an agent."""

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from semantic_version import NpmSpec

# --- Defaults of the bounds on an agent: experiment [timeouts] and [limits] start from these ------

# An exact npm version: a range would let two runs of one condition install different CLIs.
EXACT_VERSION = r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$"
DEFAULT_STALL_S = 420.0
# Silence after a harness's final answer before the rig ends it (issue: a CLI that answers, then hangs).
DEFAULT_AFTER_FINAL_S = 5.0
# No file an agent writes needs more; a bound keeps a runaway agent from filling the disk.
DEFAULT_FILE_BYTES = 2 * 1024 * 1024 * 1024
DEFAULT_HEAD_BYTES = 64 * 1024 * 1024
DEFAULT_TAIL_BYTES = 4 * 1024 * 1024
# The tail lives in the runner's memory, once per stream and worker: its bound keeps the runner small.
MAX_TAIL_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_MAX_DEPTH = 64

# --- Packs: a project with its tasks, described by pack.toml (loaded by rig.packs.manifest) ----------------

PACK_NAME = r"^[a-z0-9][a-z0-9_.-]*$"


class KnownFailure(BaseModel):
    """A test that fails on the clean fixture in rig's environment whatever the code (an
    interpreter difference, a tool the machine lacks): measured by `rig pack new`, deselected from
    the gate, and outside every mined task (rig.verify.judged)."""

    model_config = ConfigDict(extra="forbid")
    test: str = Field(min_length=1, description="the test's id as its runner names it")
    error: str = Field(description="its first error line on the clean fixture")


class GateSpec(BaseModel):
    """The project's gate: a command run in the workspace whose exit code decides.

    `run` is what the rig runs; `{python}` is the [environment]'s interpreter (the rig's own in a
    pack without one), `{node}` the node that runs the harnesses. With `report = "json"` the last
    line of its stdout is `{"ok": bool, "failed": [stage, ...], "results": {stage: [problem, ...]}}`,
    cross-checked against the exit code; with `"exit-code"` only the exit code counts and a failure
    is stage `gate`.
    """

    model_config = ConfigDict(extra="forbid")
    command: list[str] = Field(
        min_length=1, description="the gate as the project's docs tell a person to run it, e.g. npm run check"
    )
    run: list[str] = Field(min_length=1, description="what the rig runs to decide")
    report: Literal["json", "exit-code"] = "json"
    stages: list[str] = Field(default_factory=list, description="the JSON report's stages, in fixing order")
    scripts: list[str] = Field(
        default_factory=list,
        description="gate script files: running one by path or interpreter runs the gate",
    )
    timeout_s: float | None = Field(
        default=None, gt=0, description="default: the experiment's timeouts.check_s"
    )
    known_failures: list[KnownFailure] = Field(
        default_factory=list,
        description="tests failing on the clean fixture whatever the code, which `run` deselects "
        "(written by `rig pack new`)",
    )


# Each name is a module of rig/runners and a line of rig.runners.registry (tests/test_runner_kinds.py).
RunnerKind = Literal["pytest", "vitest", "jest", "mocha", "node-test", "command"]


def test_glob_problem(glob: str) -> str | None:
    """What is wrong with a test-file glob (pack.toml's `test_files`, `rig task mine --tests`), as
    the end of a sentence naming the fix; None if nothing is."""
    body = glob.removeprefix("!").removeprefix("./")
    if not body:
        return "is empty: write a glob such as test/**/*.test.js"
    if body.startswith("/"):
        return "is absolute: write it relative to the fixture root (test/**/*.js)"
    if ".." in body.split("/"):
        return "leaves the fixture: write it relative to the fixture root, without '..'"
    if "!(" in body:
        return "holds !(...), which rig does not match: exclude with a second glob starting with '!'"
    return None


class RunnerSpec(BaseModel):
    """How the hidden tests run: a built-in runner, or a command that writes junit XML.

    pytest: the rig's interpreter, the workspace's configuration ignored, `plugins` loaded with -p.
    node-test: `node --test` with its junit reporter; each hidden file wraps its tests in one
    top-level describe() named after the file's stem, so a test's id is `<stem>::<test>`.
    command: `command` with `{junit}` (where to write the report) and `{tests}` (the copied hidden
    tests folder) filled in; a test's id is `<classname>::<name>`. No canaries: the pack's own runner
    must be trusted.
    """

    model_config = ConfigDict(extra="forbid")
    kind: RunnerKind
    plugins: list[str] = Field(default_factory=list, description="pytest plugins (modules) loaded with -p")
    command: list[str] | None = None
    test_commands: list[list[str]] = Field(
        default_factory=list,
        description="more commands that count as running the tests in an agent's shell (e.g. npm test)",
    )
    test_files: list[str] = Field(
        default_factory=list,
        description="globs of the project's test files, relative to the fixture root and matched "
        "against the whole path (`**` spans folders, a leading `!` excludes); default: the runner "
        "kind's test file names",
    )

    @field_validator("test_files")
    @classmethod
    def _test_globs(cls, globs: list[str]) -> list[str]:
        for glob in globs:
            problem = test_glob_problem(glob)
            if problem:
                raise ValueError(f"{glob!r} {problem}")
        if globs and all(glob.startswith("!") for glob in globs):
            raise ValueError("every glob starts with '!': add one that says which files are tests")
        # mocha writes its specs as ./test/...: the same path.
        return [("!" if g.startswith("!") else "") + g.removeprefix("!").removeprefix("./") for g in globs]

    @model_validator(mode="after")
    def _command_for_command(self) -> "RunnerSpec":
        if self.kind == "command" and not self.command:
            raise ValueError('runner kind "command" needs command = [...] with {junit} in it')
        if self.kind != "command" and self.command:
            raise ValueError(f'runner kind {self.kind!r} takes no command; remove it or use kind = "command"')
        if self.plugins and self.kind != "pytest":
            raise ValueError('plugins are pytest plugins; remove them or use kind = "pytest"')
        return self


class ProtectSpec(BaseModel):
    """Paths an agent may not change, on top of what the runner kind protects by itself.

    files: exact workspace-relative paths. dirs: everything below these top-level folders.
    names: glob patterns matched against every component of a path (`node_modules`, `.npmrc`,
    `*.config.js`). shadow_roots (Python packs): folders put first on sys.path by the gate, where a
    module named like a stdlib or installed one would replace it ("" is the workspace root).
    """

    model_config = ConfigDict(extra="forbid")
    files: list[str] = Field(default_factory=list)
    dirs: list[str] = Field(default_factory=list)
    names: list[str] = Field(default_factory=list)
    shadow_roots: list[str] = Field(default_factory=list)


COMMIT_SHA = r"^[0-9a-f]{40}$"


class PackSource(BaseModel):
    """The repository a pack's fixture is a snapshot of, and the commit it was taken at: where
    `rig task mine` looks for fixes."""

    model_config = ConfigDict(extra="forbid")
    repo: str = Field(default="", description="the repository folder's name, for people")
    commit: str = Field(pattern=COMMIT_SHA)


# A version constraint on the interpreter: comma-separated clauses such as ">=3.11" or "==3.12.*".
_CLAUSE = r"\s*(?:===|==|!=|~=|>=|<=|>|<)\s*\d+(?:\.\d+)*(?:\.\*)?\s*"
PYTHON_CONSTRAINT = rf"^{_CLAUSE}(?:,{_CLAUSE})*$"
# PEP 508 names of extras and PEP 735 names of dependency groups.
DEPENDENCY_NAME = r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$"
ENV_VAR_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _relative_file(path: str, key: str) -> str:
    parts = Path(path).parts
    if not path or Path(path).is_absolute() or ".." in parts:
        raise ValueError(f"{key}: {path!r} must be a path relative to the fixture, inside it")
    return path


NodeManager = Literal["npm", "pnpm", "yarn"]
# The keys that say what a Python environment installs: a node environment installs its lockfile.
PYTHON_ONLY_KEYS = ("python", "project", "extras", "groups", "requirements", "pretend_version")


class EnvironmentSpec(BaseModel):
    """The project's environment, built once by `rig env build` into a cache (rig/env/).

    A Python environment (`manager` "uv", the default) installs the project itself (editable) with
    `extras`, PEP 735 dependency `groups`, `requirements` files, all resolved once into a hashed
    lock written beside pack.toml; or exactly `lock`, the project's own uv.lock or hashed
    requirements file. A node environment (`manager` "npm", "pnpm" or "yarn") installs exactly the
    fixture's lockfile (`npm ci`, `pnpm install --frozen-lockfile`, `yarn install --immutable`).
    `setup` runs after the install; `build` on every tree the agent or verification gets.
    """

    model_config = ConfigDict(extra="forbid")
    manager: Literal["uv"] | NodeManager = Field(
        default="uv",
        description='what builds the environment: "uv" (a Python virtualenv), or "npm", "pnpm" or "yarn" '
        "(a node_modules from the fixture's package-lock.json, pnpm-lock.yaml or yarn.lock)",
    )
    node: str | None = Field(
        default=None,
        description='a node environment\'s node version range, such as ">=20" (npm semver); default: '
        "package.json's engines.node, else the version in .nvmrc or .node-version. The machine's node "
        "must satisfy it",
    )
    python: str | None = Field(
        default=None,
        description='a version constraint such as ">=3.11"; default: the interpreter that runs rig',
    )
    project: bool = Field(default=True, description="install the fixture's project itself, editable")
    extras: list[Annotated[str, Field(pattern=DEPENDENCY_NAME)]] = Field(
        default_factory=list, description="the project's optional-dependency extras to install"
    )
    groups: list[Annotated[str, Field(pattern=DEPENDENCY_NAME)]] = Field(
        default_factory=list, description="PEP 735 dependency groups of the fixture's pyproject.toml"
    )
    requirements: list[str] = Field(
        default_factory=list, description="requirements files to install, relative to the fixture"
    )
    lock: str | None = Field(
        default=None,
        description="the project's uv.lock or hashed requirements file (relative to the fixture), "
        "installed exactly; default: a lock rig resolves once into environment.lock.txt beside pack.toml. "
        "A node environment's lockfile, default package-lock.json (npm-shrinkwrap.json), pnpm-lock.yaml "
        "or yarn.lock",
    )
    setup: list[str] = Field(
        default_factory=list,
        description="shell lines (sh -c) run once, in order, at the environment's root after the install",
    )
    build: list[str] = Field(
        default_factory=list,
        description="shell lines (sh -c) that derive files from the sources (a version file, compiled "
        "translations, generated code), run at the tree's root on each run's starting tree before the "
        "agent and again on the verification copy before the gate and the hidden tests",
    )
    env: dict[Annotated[str, Field(pattern=ENV_VAR_NAME)], str] = Field(
        default_factory=dict, description="environment variables the project's tests need"
    )
    pretend_version: bool | str = Field(
        default=True,
        description="the version a backend that derives it from git reports (setuptools-scm, hatch-vcs, "
        'PDM, poetry-dynamic-versioning): true means "0.0.0", false sets nothing',
    )

    @field_validator("node")
    @classmethod
    def _node_range(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                NpmSpec(value)
            except ValueError:
                raise ValueError(
                    f'{value!r} is not an npm version range; write e.g. ">=20" or "^20.11"'
                ) from None
        return value

    @field_validator("python")
    @classmethod
    def _constraint(cls, value: str | None) -> str | None:
        if value is not None and not re.match(PYTHON_CONSTRAINT, value):
            raise ValueError(f'{value!r} is not a version constraint; write e.g. ">=3.11" or "==3.12.*"')
        return value

    @property
    def is_node(self) -> bool:
        """Whether a node package manager builds it (else uv)."""
        return self.manager != "uv"

    @model_validator(mode="after")
    def _consistent(self) -> "EnvironmentSpec":
        if self.is_node:
            python_keys = [key for key in PYTHON_ONLY_KEYS if key in self.model_fields_set]
            if python_keys:
                raise ValueError(
                    f"{', '.join(python_keys)}: a Python environment's keys; a {self.manager} environment "
                    'installs the fixture\'s lockfile, so remove them (or set manager = "uv")'
                )
        elif self.node is not None:
            raise ValueError(
                'node: a node environment\'s key; set manager = "npm", "pnpm" or "yarn", or remove it'
            )
        for path in self.requirements:
            _relative_file(path, "requirements")
        if self.lock is not None:
            _relative_file(self.lock, "lock")
            if self.requirements:
                raise ValueError("lock installs exactly what it pins; list no requirements beside it")
        if self.extras and not self.project:
            raise ValueError("extras are the project's; set project = true or remove them")
        if self.pretend_version == "":
            raise ValueError('pretend_version: give a version such as "1.0.0", true or false')
        return self


class PackSpec(BaseModel):
    """A task pack's manifest: pack.toml. Folders are relative to the file."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=PACK_NAME)
    description: str = ""
    language: str = ""
    fixture: str = "fixture"
    tasks: str = "tasks"
    hidden_tests: str = "hidden_tests"
    gate: GateSpec
    runner: RunnerSpec
    protect: ProtectSpec = Field(default_factory=ProtectSpec)
    docs: list[str] = Field(
        default_factory=lambda: ["README.md", "CONTRIBUTING.md", "AGENTS.md", "CLAUDE.md", "docs/*"],
        description="glob patterns of documentation (a `*` crosses folders): reading one is reading docs",
    )
    context_files: list[str] = Field(
        default_factory=lambda: ["AGENTS.md", "CLAUDE.md", "GEMINI.md"],
        description="the agent-instruction files a condition commonly removes",
    )
    source: PackSource | None = None
    environment: EnvironmentSpec | None = Field(
        default=None, description="the project's Python environment (docs/environments.md); none: rig's own"
    )


# The folder of a pack holding its tasks' bases (rig.workspace.bases) and their generated locks.
BASES_DIR = "bases"


class Pack(BaseModel):
    """A loaded pack: its manifest and the folder it lives in."""

    spec: PackSpec
    root: Path
    base: Path | None = Field(
        default=None,
        description="a task's own starting tree instead of the fixture (rig.workspace.bases), written out",
    )
    base_environment: bool = Field(
        default=True,
        description="whether the environment is the base's own (its dependency files'), else the fixture's",
    )

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def fixture_dir(self) -> Path:
        """The tree workspaces start from: the task's base, else the pack's fixture."""
        return self.base or self.root / self.spec.fixture

    @property
    def environment_dir(self) -> Path:
        """The tree whose dependency files make the environment: the base's own, else the fixture."""
        return self.base if self.base is not None and self.base_environment else self.root / self.spec.fixture

    @property
    def plain(self) -> "Pack":
        """The pack itself, its fixture the starting tree."""
        return self if self.base is None else self.model_copy(update={"base": None, "base_environment": True})

    def at(self, base: Path, own_environment: bool = True) -> "Pack":
        """The pack as a task starting from the tree at `base` sees it: its gate, and the environment
        of its own dependency files (or, `own_environment` False, the fixture's)."""
        return self.model_copy(update={"base": base, "base_environment": own_environment})

    @property
    def tasks_dir(self) -> Path:
        return self.root / self.spec.tasks

    @property
    def hidden_dir(self) -> Path:
        return self.root / self.spec.hidden_tests


# --- Tasks: tasks/<id>/task.toml and the files that belong to it (loaded by rig.packs.tasks) -------------


class Expectation(BaseModel):
    """Where a wrong workspace must fail: gate stages and hidden tests (`module::test`)."""

    model_config = ConfigDict(extra="forbid")
    fails_stages: list[str] = Field(default_factory=list)
    fails_hidden: list[str] = Field(default_factory=list)


class Decoy(Expectation):
    reason: str = Field(min_length=1, description="the plausible wrong solution this patch stands for")


class TaskSource(BaseModel):
    """Where a mined task came from (`rig task mine`): the fix commit, and the hidden tests that
    judge it (rig.verify.judged): those that passed with the fix and not before it (`fail_to_pass`),
    and those that passed both before and after it (`pass_to_pass`)."""

    model_config = ConfigDict(extra="forbid")
    repo: str = ""
    commit: str = Field(pattern=COMMIT_SHA)
    subject: str = ""
    parent: str | None = Field(
        default=None, pattern=COMMIT_SHA, description="the fix's parent, when the task starts there (`base`)"
    )
    pass_to_pass: list[str] = Field(default_factory=list)
    fail_to_pass: list[str] | None = Field(
        default=None,
        description="the hidden tests that pass with the fix and failed, skipped or did not run "
        "before it; with pass_to_pass, the tests that judge the task. None (a task mined before rig "
        "judged by test): every test of its hidden files judges it",
    )


# Where a task's hidden tests run: "folder", hidden_tests/<id>/ copied as one folder
# (`_hidden_tests/`) into the tree, as hand-written tasks have them; "own-paths", hidden_tests/<id>/
# mirrors the tree and each file runs at its own path, beside the tree's conftest.py files,
# helpers and data, as the project's own runner would run it (mined tasks).
HiddenAt = Literal["folder", "own-paths"]


class Placement(BaseModel):
    """Where a task's hidden tests run, and (at their own paths) which hidden files are the tests;
    the others are their companions from the pristine tree (helpers, data, `__init__.py`)."""

    model_config = ConfigDict(frozen=True)
    at: HiddenAt = "folder"
    tests: tuple[str, ...] = ()


# Hand-written tasks' placement: one folder.
IN_FOLDER = Placement()


class TaskSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[a-z0-9_]+$")
    hypothesis: str = Field(min_length=1, description="the harness component this task measures")
    prompt: str = Field(min_length=1)
    timeout_s: int = Field(gt=0)
    baseline: Expectation
    decoys: dict[str, Decoy]
    source: TaskSource | None = None
    scope: list[str] | None = Field(
        default=None,
        description="globs (fnmatch, `*` crosses `/`) of the workspace paths the task may change; "
        "a change elsewhere is listed in the record's out_of_scope; None: no scope",
    )
    scope_enforced: bool = Field(
        default=False, description="a change outside `scope` fails the run (stage scope)"
    )
    base: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{40}$",
        description="the git tree hash of the task's starting tree, kept in the pack's bases/bases.bundle "
        "(a mined task at its fix's parent); None: the fixture",
    )
    environment: Literal["base", "fixture"] = Field(
        default="base",
        description="a task with a base: the environment its own dependency files call for (base), or, when "
        "they make none, the fixture's (fixture), in which its fail-to-pass was measured",
    )
    hidden_at: HiddenAt = Field(
        default="folder",
        description="folder: hidden_tests/<id>/ is copied into the tree as one folder, _hidden_tests/; "
        "own-paths: it mirrors the tree, and each file is put at its own path (replacing the agent's) "
        "and runs there",
    )
    hidden_tests: list[str] = Field(
        default_factory=list,
        description="own-paths: which hidden files (paths in the tree) are tests to run; the others are put "
        "in place from the pristine tree beside them (helpers, data, __init__.py) and not run. Empty: all",
    )

    @field_validator("hidden_tests")
    @classmethod
    def _relative_tests(cls, paths: list[str]) -> list[str]:
        return [_relative_file(path, "hidden_tests") for path in paths]

    @model_validator(mode="after")
    def _enforced_needs_scope(self) -> "TaskSpec":
        if self.scope_enforced and not self.scope:
            raise ValueError(
                "scope_enforced = true needs scope = [globs]; list the paths the task may change"
            )
        return self


class Task(BaseModel):
    """A loaded task: its spec and the files that belong to it."""

    spec: TaskSpec
    dir: Path
    hidden_dir: Path
    pack: Pack

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def setup_patch(self) -> Path:
        return self.dir / "setup.patch"

    @property
    def solution_patch(self) -> Path:
        return self.dir / "solution.patch"

    def decoy_patch(self, name: str) -> Path:
        return self.dir / "decoys" / f"{name}.patch"

    @property
    def placement(self) -> Placement:
        """Where its hidden tests run, and which are tests."""
        return Placement(at=self.spec.hidden_at, tests=tuple(self.spec.hidden_tests))

    @property
    def judged(self) -> frozenset[str] | None:
        """The hidden tests whose outcomes decide it (rig.verify.judged); None: every hidden test."""
        source = self.spec.source
        if source is None or source.fail_to_pass is None:
            return None
        return frozenset(source.fail_to_pass) | frozenset(source.pass_to_pass)


class BuiltEnvironment(BaseModel):
    """What `rig env build` wrote last into a built environment (`<env>/.rig-env.json`): its presence
    is what makes the environment complete, so a half-built one is never used."""

    model_config = ConfigDict(extra="forbid")
    hash: str = Field(description="the environment's identity (rig/env/identity.py)")
    pack: str = Field(description="the name of the pack it was built for")
    manager: Literal["uv"] | NodeManager = Field(
        default="uv", description="what built it ([environment] manager)"
    )
    python: str = Field(description="the interpreter it was made from (a node environment: rig's own)")
    python_version: str
    platform: str
    packages: list[str] = Field(
        description="`uv pip freeze` of the environment, after setup; a node environment's packages at the "
        "top of its node_modules, `name==version`"
    )
    base_prefix: str = Field(
        description="the interpreter installation it was made from (sys.base_prefix); a node environment's "
        "node installation"
    )
    node: str | None = Field(default=None, description="a node environment's node binary")
    tools: list[str] = Field(
        default_factory=list,
        description="folders its users need on PATH after its own bin: the pnpm or yarn rig installed "
        "beside the environments for a pnpm or yarn environment",
    )
    variables: dict[str, str] = Field(
        default_factory=dict,
        description="variables its package manager needs in every command that uses it: yarn 2+'s "
        "node-modules linker and the install state kept in the environment",
    )
    node_version: str | None = Field(default=None, description="a node environment's node version")
    source_roots: list[str] = Field(
        description='where a tree\'s importable packages live, relative to it ("" is its root)'
    )
    generated: list[str] = Field(
        default_factory=list,
        description="files the project's install generated in its copy (a version file), under "
        "`.rig-generated/`; put into every tree before it is used",
    )
    pytest_plugins: list[str] = Field(
        default_factory=list, description="the pytest plugin modules its distributions register (pytest11)"
    )
    built_at: str = Field(description="when the build finished, UTC, ISO 8601")
    seconds: float = Field(ge=0, description="how long the build took")

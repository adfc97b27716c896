"""`rig pack new`'s guess at a project's `[environment]`, from its tracked files alone.

Nothing of the project is run or installed. A node project's environment is the package manager
of its tracked lockfile. For a Python project, pyproject.toml, requirements files, tox.ini and the
GitHub workflows are read as text. Where the test dependencies come from is taken in an order of
preference (test extras, dependency groups, requirements files, tox.ini; a `dev` one only when no
source has a test one), so the environment is the one the project's own test run would install.
A workflow's shell steps before its test step become `setup` lines, or `build` lines when they
derive files; the system packages they install are left to the machine and said as notes.
"""

import configparser
import json
import posixpath
import re
import shlex
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from importlib.metadata import version
from typing import Any

import yaml

from rig.runners.base import Project
from rig.schema.pack import DEPENDENCY_NAME, ENV_VAR_NAME

# A file larger than this is not parsed: a repository's configuration is far smaller.
MAX_BYTES = 1_000_000
PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
TEST_NAMES = ("test", "tests", "testing")
DEV_NAMES = ("dev",)
REQUIREMENTS_TEST = ("requirements/test*.txt", "requirements-test*.txt", "test-requirements.txt")
REQUIREMENTS_DEV = ("requirements/dev*.txt", "requirements-dev.txt")
REQUIREMENTS_PLAIN = ("requirements.txt",)
UV_LOCK = "uv.lock"
NOXFILE = "noxfile.py"
TOX_INI = "tox.ini"
WORKFLOWS = (".github/workflows/*.yml", ".github/workflows/*.yaml")
# The order pack.toml lists the keys in, and the summary.
KEYS = (
    "manager",
    "project",
    "extras",
    "groups",
    "requirements",
    "lock",
    "env",
    "pretend_version",
    "setup",
    "build",
)
# A node project's lockfiles, in order of preference, and the manager that installs each exactly:
# when several are tracked and package.json's packageManager names none of their managers, the
# stricter, newer formats first (a package-lock.json beside another lockfile is usually a stray
# `npm install`).
NODE_LOCKS = (
    ("pnpm-lock.yaml", "pnpm"),
    ("yarn.lock", "yarn"),
    ("package-lock.json", "npm"),
    ("npm-shrinkwrap.json", "npm"),
)
UNSUPPORTED_LOCKS = ("bun.lockb", "bun.lock")
PACKAGE_MANAGER = re.compile(r"^\s*(npm|pnpm|yarn)@")

REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[([^\]]*)\])?")
REQUIREMENT_INCLUDE = re.compile(r"^(?:-r\s*|--requirement(?:\s*=\s*|\s+))(\S+)")
# tox's factor-conditional deps (`py311: pytest<8`) apply to some environments: the condition is dropped.
TOX_FACTOR = re.compile(r"^[A-Za-z0-9_{},!.-]+:\s+")
OTHER_OS = re.compile(r"windows|macos|darwin|win32", re.IGNORECASE)
# Shell that a line-by-line reading would break: such a step is kept whole, as one line.
COMPOUND = re.compile(r"^(?:if|for|while|until|case|then|do|else|elif|fi|done|esac)\b|^[{}]|\(\)\s*\{")
TEST_COMMAND = re.compile(r"\b(?:py\.?test|tox|nox)\b")
# Commands that derive files from the sources: compiled translations, generated code, built extensions.
DERIVES = re.compile(
    r"\bmsgfmt\b|\bpybabel\s+compile\b|\bbabel\b.*\bcompile\b|\bcompile_?messages\b|\bcompile_catalog\b"
    r"|\bprotoc\b|\bcythonize\b|\bbuild_ext\b"
)
GENERATING_TARGET = re.compile(
    r"compile|build|gen|translation|locale|messages|\bmo\b|proto|assets|version|i18n", re.IGNORECASE
)
SYSTEM_TOOLS = frozenset({"apt", "apt-get", "brew", "choco", "yum", "dnf"})
# Wrappers whose first argument is the command that runs.
RUNNERS = {"uv": "run", "poetry": "run", "hatch": "run", "pdm": "run", "pipenv": "run"}
PROJECT_INSTALLERS = {"poetry": ("install",), "pdm": ("install", "sync"), "pipenv": ("install", "sync")}
# A CI step that only reports, checks style or talks to the CI host sets nothing up for the tests.
NOISE = frozenset(
    {"echo", "printf", "true", ":", "cd", "ls", "cat", "which", "set", "export", "git", "pwd"}
    | {"ruff", "flake8", "mypy", "black", "isort", "pre-commit", "pylint", "codespell", "pyright"}
    | {"pipx", "sleep", "df", "uname", "nproc"}
)
# Packaging tools whose own commands (`poetry config virtualenvs.create false`, `hatch env create`,
# `python -m build`, `python -m venv venv`) set up the tool, which rig does not use (it builds the
# environment with uv from the project's metadata): never a setup line, which would fail where the
# tool is not installed.
MANAGERS = frozenset(
    {"poetry", "pdm", "hatch", "pipenv", "venv", "virtualenv", "conda", "mamba", "build", "flit"}
)
# Packaging tools a workflow installs for itself, not for the tests.
TOOLS = frozenset(
    {"pip", "setuptools", "wheel", "tox", "nox", "uv", "build", "virtualenv", "hatch", "pdm", "poetry"}
)
PIP_VALUE_OPTIONS = frozenset(
    {"-c", "--constraint", "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--python"}
    | {"-t", "--target", "--prefix", "--root", "--extra", "--only-binary", "--no-binary", "-p"}
)
PIP_COVERED_OPTIONS = frozenset({"-r", "--requirement", "-e", "--editable", "--group"})

# pytest at the version rig pins, for a project that runs it and lists it nowhere rig reads.
PYTEST_SETUP = f"uv pip install --python bin/python pytest=={version('pytest')}"
PYTEST_WHY = (
    "pytest runs the tests and no source above lists it: the version rig pins, installed after the "
    "lock (its own dependencies are resolved at build time; list pytest in a group or requirements "
    "file to lock it)"
)


@dataclass
class InferredEnvironment:
    """The `[environment]` guessed for a Python project: its fields, why each, and what is left to do.

    `evidence` maps a key of KEYS to where its value came from; `notes` are what the guess could not
    settle (system packages to install, dependencies no source lists, files not read).
    """

    project: bool
    manager: str = "uv"
    """What builds it: "uv" (a Python project) or the node package manager its lockfile names."""
    extras: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)
    lock: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    version_from_git: bool = False
    """A build backend reads rig's pretend version: pack.toml says so with `pretend_version = true`."""
    setup: list[str] = field(default_factory=list)
    build: list[str] = field(default_factory=list)
    evidence: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def values(self) -> list[tuple[str, object]]:
        """The keys to write, in KEYS order, with their values: `project` (a node environment's
        `manager`) always, the rest when set."""
        if self.is_node:
            node = {"manager": self.manager, "env": self.env, "setup": self.setup, "build": self.build}
            return [(key, node[key]) for key in KEYS if key == "manager" or node.get(key)]
        values: dict[str, object] = {
            "project": self.project,
            "extras": self.extras,
            "groups": self.groups,
            "requirements": self.requirements,
            "lock": self.lock,
            "env": self.env,
            "pretend_version": True if self.version_from_git else None,
            "setup": self.setup,
            "build": self.build,
        }
        return [(key, values[key]) for key in KEYS if key == "project" or values.get(key)]

    @property
    def is_node(self) -> bool:
        """Whether a node package manager builds it."""
        return self.manager != "uv"

    def add_lines(self, setup: Iterable[str], build: Iterable[str]) -> None:
        """Append the author's own setup and build lines (`rig pack new --setup/--build`)."""
        for key, lines, flag in (("setup", list(setup), "--setup"), ("build", list(build), "--build")):
            if lines:
                getattr(self, key).extend(lines)
                self._why(key, f"given with {flag}")
        if PYTEST_SETUP in self.setup and _installs_pytest(setup):
            # The author installs pytest their own way.
            self.setup.remove(PYTEST_SETUP)
            self.evidence["setup"] = [why for why in self.evidence["setup"] if why != PYTEST_WHY]

    def _why(self, key: str, evidence: str) -> None:
        reasons = self.evidence.setdefault(key, [])
        if evidence not in reasons:
            reasons.append(evidence)


def _installs_pytest(lines: Iterable[str]) -> bool:
    """Whether any of the setup `lines` names pytest (and so installs it its own way)."""
    return any(re.search(r"\bpytest\b", line) for line in lines)


@dataclass(frozen=True)
class _Source:
    """One place the test dependencies may come from, as the fields it would set."""

    evidence: str
    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()


def _normal(name: str) -> str:
    """A distribution or extra name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _table(data: object, *keys: str) -> dict[str, Any]:
    """The nested TOML table at `keys`, or an empty one when any level is missing or not a table."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _read(project: Project, path: str, notes: list[str]) -> str | None:
    """A tracked file's text, or None when it is absent, unreadable or too large (then a note says so)."""
    if path not in project.files:
        return None
    text = project.read(path)
    if text is not None and len(text.encode("utf-8", "surrogateescape")) > MAX_BYTES:
        notes.append(f"{path} is over {MAX_BYTES // 1_000_000} MB and was not read; check [environment]")
        return None
    return text


def _matching(files: list[str], patterns: tuple[str, ...]) -> list[str]:
    return sorted(f for f in files if any(fnmatchcase(f, p) for p in patterns))


def _is_python(project: Project, runs_pytest: bool) -> bool:
    """Whether the repository is a Python project: pytest tests, or Python packaging files at its root."""
    return runs_pytest or any(name in project.files for name in PROJECT_FILES)


def infer(project: Project, runs_pytest: bool) -> InferredEnvironment | None:
    """The `[environment]` the repository's files suggest, or None when it is neither a Python
    project nor a node project with a lockfile.

    `runs_pytest`: the hidden tests run with pytest, so the environment must hold it.
    """
    if not _is_python(project, runs_pytest):
        return infer_node(project)
    notes: list[str] = []
    pyproject: dict[str, Any] = {}
    text = _read(project, "pyproject.toml", notes)
    if text is not None:
        try:
            pyproject = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            notes.append(f"pyproject.toml is not valid TOML ({exc}); nothing was read from it")
    meta = _table(pyproject, "project")
    installable = bool(meta or _table(pyproject, "build-system")) or any(
        name in project.files for name in PROJECT_FILES[1:]
    )
    guess = InferredEnvironment(project=installable, notes=notes)
    if meta:
        named = f" {meta['name']}" if isinstance(meta.get("name"), str) else ""
        guess._why("project", f"pyproject.toml [project]{named}: the project is installed editable")
    elif installable:
        source = next(name for name in PROJECT_FILES if name in project.files)
        guess._why("project", f"{source}: the project is installed editable")
    else:
        guess._why("project", "no [project] or [build-system] in pyproject.toml, no setup.py or setup.cfg")

    if UV_LOCK in project.files:
        guess.lock = UV_LOCK
        guess._why("lock", f"{UV_LOCK} is tracked: installed exactly as it pins")
    tox = _tox(project, guess)
    _choose(project, guess, pyproject, tox)
    covered = _covered(project, guess, pyproject)
    if tox is not None and tox.plain:
        missing = [line for name, line in tox.plain if name not in covered]
        if missing:
            notes.append(
                f"{TOX_INI} [testenv] deps also lists {', '.join(missing)}, which no source above installs; "
                "add to a requirements file, or a setup line "
                f"`uv pip install --python bin/python {' '.join(shlex.quote(m) for m in missing)}`"
            )
    if NOXFILE in project.files:
        notes.append(f"{NOXFILE}: nox sessions are not read; check [environment]")
    _version_backend(project, guess, pyproject)
    _workflows(project, guess, covered)
    if runs_pytest and "pytest" not in covered and not _installs_pytest(guess.setup):
        guess.setup.append(PYTEST_SETUP)
        guess._why("setup", PYTEST_WHY)
    return guess


def infer_node(project: Project) -> InferredEnvironment | None:
    """A node project's environment: the package manager of its tracked lockfile (pnpm-lock.yaml,
    yarn.lock, package-lock.json), installed exactly; the one package.json's packageManager names
    first, since it is what the project's own tooling (corepack) runs. None without package.json or
    a lockfile rig installs."""
    if "package.json" not in project.files:
        return None
    tracked = [(lock, manager) for lock, manager in NODE_LOCKS if lock in project.files]
    if not tracked:
        return None
    named = _package_manager(project)
    lock, manager = next(((lk, m) for lk, m in tracked if m == named), tracked[0])
    guess = InferredEnvironment(project=False, manager=manager)
    said = f" and package.json's packageManager names {manager}" if manager == named else ""
    guess._why("manager", f"{lock} is tracked{said}: `{manager}` installs it exactly")
    others = [name for name, _ in tracked if name != lock] + [
        name for name in UNSUPPORTED_LOCKS if name in project.files
    ]
    if others:
        guess.notes.append(f"{', '.join(others)} also tracked: rig installs {lock} only")
    return guess


def _package_manager(project: Project) -> str | None:
    """The package manager package.json's packageManager names (npm, pnpm or yarn), if any."""
    text = project.read("package.json")
    try:
        manifest = json.loads(text) if text is not None else None
    except ValueError:
        return None
    named = manifest.get("packageManager") if isinstance(manifest, dict) else None
    match = PACKAGE_MANAGER.match(named) if isinstance(named, str) else None
    return match.group(1) if match is not None else None


def _choose(
    project: Project, guess: InferredEnvironment, pyproject: dict[str, Any], tox: "_Tox | None"
) -> None:
    """Set extras, groups and requirements from the first source that has test dependencies."""
    optional = _table(pyproject, "project", "optional-dependencies")
    groups = _table(pyproject, "dependency-groups")

    def named(table: dict[str, Any], names: tuple[str, ...]) -> list[str]:
        return [k for k in table if _normal(k) in names and re.match(DEPENDENCY_NAME, k)]

    def extras(names: tuple[str, ...]) -> _Source | None:
        found = named(optional, names) if guess.project else []
        where = "pyproject.toml [project.optional-dependencies]"
        return _Source(f"{where} {', '.join(found)}", extras=tuple(found)) if found else None

    def dependency_groups(names: tuple[str, ...]) -> _Source | None:
        found = named(groups, names)
        return (
            _Source(f"pyproject.toml [dependency-groups] {', '.join(found)}", groups=tuple(found))
            if found
            else None
        )

    def files(patterns: tuple[str, ...]) -> _Source | None:
        found = _matching(project.files, patterns)
        return _Source(f"tracked {', '.join(found)}", requirements=tuple(found)) if found else None

    tiers = [
        [
            extras(TEST_NAMES),
            dependency_groups(TEST_NAMES),
            files(REQUIREMENTS_TEST),
            tox.source if tox else None,
        ],
        [extras(DEV_NAMES), dependency_groups(DEV_NAMES), files(REQUIREMENTS_DEV)],
        [files(REQUIREMENTS_PLAIN)],
    ]
    if guess.lock is not None:
        # A lock installs exactly what it pins: requirements files cannot be added beside it (_tox
        # has left out tox's).
        refused = [s.evidence for tier in tiers for s in tier if s is not None and s.requirements]
        tiers = [[s for s in tier if s is None or not s.requirements] for tier in tiers]
        if refused:
            guess.notes.append(_beside_lock("; ".join(refused)))
    found = next((t for t in ([s for s in tier if s is not None] for tier in tiers) if t), [])
    if not found:
        return
    chosen = found[0]
    guess.extras, guess.groups = list(chosen.extras), list(chosen.groups)
    guess.requirements = list(chosen.requirements)
    for key in ("extras", "groups", "requirements"):
        if getattr(chosen, key):
            guess._why(key, chosen.evidence)
    plain = "requirements.txt"
    if (
        not guess.project
        and guess.lock is None
        and plain in project.files
        and plain not in guess.requirements
    ):
        # Nothing else installs the runtime dependencies of a project that is not a package.
        guess.requirements.append(plain)
        guess._why("requirements", f"tracked {plain}: the dependencies of a project that is not installable")
    # A source that would add nothing to the one taken (tox naming the same extra) is worth no note.
    others = [
        s.evidence
        for s in found[1:]
        if not (
            set(s.extras) <= set(guess.extras)
            and set(s.groups) <= set(guess.groups)
            and set(s.requirements) <= set(guess.requirements)
        )
    ]
    if others:
        guess.notes.append(
            "also found, not used (the first source is taken; add these if the tests need them): "
            + "; ".join(others)
        )


def _beside_lock(what: str) -> str:
    """The note for requirements files that a lock leaves out."""
    return f"not used beside lock = {UV_LOCK!r}, which takes no requirements files: {what}"


def _covered(project: Project, guess: InferredEnvironment, pyproject: dict[str, Any]) -> set[str]:
    """The normalized names of the packages the guessed environment lists, directly or by inclusion."""
    meta = _table(pyproject, "project")
    own = _normal(meta["name"]) if isinstance(meta.get("name"), str) else None
    optional = _table(meta, "optional-dependencies")
    groups = _table(pyproject, "dependency-groups")
    names: set[str] = set()
    seen_extras: set[str] = set()

    def requirement(line: str) -> None:
        match = REQUIREMENT_NAME.match(line)
        if match is None:
            return
        if _normal(match[1]) == own and match[2]:
            for extra in match[2].split(","):
                add_extra(extra.strip())
        else:
            names.add(_normal(match[1]))

    def add_extra(extra: str) -> None:
        key = next((k for k in optional if _normal(k) == _normal(extra)), None)
        if key is not None and key not in seen_extras:
            seen_extras.add(key)
            for line in _strings(optional[key]):
                requirement(line)

    def add_group(group: str, seen: set[str]) -> None:
        key = next((k for k in groups if _normal(k) == _normal(group)), None)
        if key is None or key in seen:
            return
        seen.add(key)
        entries = groups[key] if isinstance(groups[key], list) else []
        for entry in entries:
            if isinstance(entry, str):
                requirement(entry)
            elif isinstance(entry, dict) and isinstance(entry.get("include-group"), str):
                add_group(entry["include-group"], seen)

    if guess.project:
        for line in _strings(meta.get("dependencies")):
            requirement(line)
    for extra in guess.extras:
        add_extra(extra)
    for group in guess.groups:
        add_group(group, set())
    seen_files: set[str] = set()
    for path in guess.requirements:
        names |= _requirement_names(project, path, seen_files, guess.notes)
    return names


def _logical_lines(text: str) -> list[str]:
    """Lines with backslash continuations joined, comments and blanks dropped."""
    joined = re.sub(r"\\\r?\n", " ", text)
    lines = (re.sub(r"(?:^|\s)#.*", "", line).strip() for line in joined.splitlines())
    return [line for line in lines if line]


def _requirement_names(project: Project, path: str, seen: set[str], notes: list[str]) -> set[str]:
    """The package names a requirements file lists, following its `-r` includes among tracked files."""
    if path in seen:
        return set()
    seen.add(path)
    names: set[str] = set()
    for line in _logical_lines(_read(project, path, notes) or ""):
        include = REQUIREMENT_INCLUDE.match(line)
        if include:
            nested = posixpath.normpath(posixpath.join(posixpath.dirname(path), include[1]))
            names |= _requirement_names(project, nested, seen, notes)
        elif not line.startswith("-") and (name := _name(line)):
            names.add(name)
    return names


@dataclass(frozen=True)
class _Tox:
    """What tox.ini's [testenv] installs: a source of requirements and extras, and plain packages."""

    source: _Source | None
    plain: list[tuple[str, str]]
    """(normalized name, the deps line) of each package listed by name."""


def _tox(project: Project, guess: InferredEnvironment) -> _Tox | None:
    """Read tox.ini's [testenv]: `deps` and `extras` as a source, `setenv` into the guess's env."""
    text = _read(project, TOX_INI, guess.notes)
    if text is None:
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text, TOX_INI)
    except configparser.Error as exc:
        first = str(exc).splitlines()[0]
        guess.notes.append(f"{TOX_INI} could not be read ({first}); check [environment]")
        return None
    if not parser.has_section("testenv"):
        return None
    section = parser["testenv"]
    requirements: list[str] = []
    plain: list[tuple[str, str]] = []
    skipped: list[str] = []
    for line in _logical_lines(section.get("deps", "")):
        line = TOX_FACTOR.sub("", line).replace("{toxinidir}/", "")
        include = REQUIREMENT_INCLUDE.match(line)
        if "{" in line:
            skipped.append(line)
        elif include:
            path = posixpath.normpath(include[1])
            if path in project.files:
                requirements.append(path)
            else:
                guess.notes.append(f"{TOX_INI} [testenv] deps `{line}`: {path} is not a tracked file")
        elif not line.startswith("-") and (name := _name(line)):
            plain.append((name, line))
    extras = [e for e in re.split(r"[\s,]+", section.get("extras", "")) if e and re.match(DEPENDENCY_NAME, e)]
    for line in _logical_lines(section.get("setenv", "")):
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not re.match(ENV_VAR_NAME, key) or "{" in value:
            skipped.append(line)
            continue
        guess.env[key] = value
        guess._why("env", f"{TOX_INI} [testenv] setenv")
    if skipped:
        guess.notes.append(
            f"{TOX_INI} [testenv] lines not read (tox substitutions, or not NAME = value): "
            + "; ".join(skipped)
        )
    if not guess.project:
        extras = []  # extras are the project's: none without an installable project
    if guess.lock is not None and requirements:
        guess.notes.append(_beside_lock(f"{TOX_INI} [testenv] deps -r {', '.join(requirements)}"))
        requirements = []
    if not (requirements or extras):
        return _Tox(None, plain)
    what = " and ".join(part for part, there in (("deps -r", requirements), ("extras", extras)) if there)
    return _Tox(_Source(f"{TOX_INI} [testenv] {what}", tuple(extras), (), tuple(requirements)), plain)


def _version_backend(project: Project, guess: InferredEnvironment, pyproject: dict[str, Any]) -> None:
    """Say where the version comes from when a backend derives it from git, and what it generates."""
    build = _table(pyproject, "build-system")
    requires = {_normal(m[1]) for r in _strings(build.get("requires")) if (m := REQUIREMENT_NAME.match(r))}
    backend = build.get("build-backend") if isinstance(build.get("build-backend"), str) else ""
    tool = _table(pyproject, "tool")
    legacy = "".join(_read(project, name, guess.notes) or "" for name in PROJECT_FILES[1:])
    where = "pyproject.toml [build-system]"
    generated: list[str] = []
    # hatch-vcs first: it reads [tool.setuptools_scm] too, which is then no sign of setuptools-scm.
    if "hatch-vcs" in requires:
        name = "hatch-vcs"
        hook = _table(tool, "hatch", "build", "hooks", "vcs")
        generated = [f"{hook[k]} ({k})" for k in ("version-file",) if isinstance(hook.get(k), str)]
    elif "setuptools-scm" in requires or "setuptools_scm" in tool or "setuptools_scm" in legacy:
        name = "setuptools-scm"
        if not ("setuptools-scm" in requires or "setuptools_scm" in tool):
            where = "setup.py / setup.cfg"
        scm = _table(tool, "setuptools_scm")
        generated = [f"{scm[k]} ({k})" for k in ("version_file", "write_to") if isinstance(scm.get(k), str)]
    elif "versioningit" in requires:
        name = "versioningit"
        write = _table(tool, "versioningit", "write")
        generated = (
            [f"{write['file']} ([tool.versioningit.write] file)"]
            if isinstance(write.get("file"), str)
            else []
        )
    elif backend.startswith("pdm.backend") and _table(tool, "pdm", "version").get("source") == "scm":
        name = "pdm-backend (scm)"
        version = _table(tool, "pdm", "version")
        generated = [f"{version['write_to']} (write_to)"] if isinstance(version.get("write_to"), str) else []
    elif "poetry-dynamic-versioning" in requires:
        name = "poetry-dynamic-versioning"
    elif "versioneer" in requires or "versioneer.py" in project.files or "[versioneer]" in legacy:
        guess._why(
            "pretend_version",
            f"{where} versioneer: the version comes from git; versioneer reads no pretend version, so "
            "without the history it reports 0+unknown (which installs)",
        )
        return
    else:
        return
    guess.version_from_git = True
    made = f"; {', '.join(generated)} is generated at install" if generated else ""
    guess._why(
        "pretend_version",
        f"{where} {name}: the version comes from git; rig sets the pretend version (true: 0.0.0; give "
        f"a real one if a dependency needs a minimum version of the project){made}",
    )


def _workflows(project: Project, guess: InferredEnvironment, covered: set[str]) -> None:
    """The shell steps before the test step of the first workflow job that runs the tests."""
    for path in _matching(project.files, WORKFLOWS):
        text = _read(project, path, guess.notes)
        if text is None:
            continue
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            guess.notes.append(f"{path} is not valid YAML ({first}); it was not read")
            continue
        for job_id, job in _table(data, "jobs").items():
            if not isinstance(job, dict) or not isinstance(job.get("steps"), list):
                continue
            runs_on = job.get("runs-on")
            runs_on = " ".join(runs_on) if isinstance(runs_on, list) else str(runs_on or "")
            if "${{" not in runs_on and OTHER_OS.search(runs_on):
                continue
            steps = [s for s in job["steps"] if isinstance(s, dict) and _applies(s)]
            test = next((i for i, s in enumerate(steps) if "test" in _classes(s)), None)
            if test is None:
                continue
            for step in steps[:test]:
                _take_step(guess, step, f"{path} job {job_id}", covered)
            return


def _applies(step: dict[str, Any]) -> bool:
    """Whether a step is a plain shell step that runs on Linux, without CI expressions."""
    run, shell = step.get("run"), str(step.get("shell", "sh"))
    if not isinstance(run, str) or "${{" in run or shell.startswith(("pwsh", "powershell", "cmd")):
        return False
    return not OTHER_OS.search(str(step.get("if", ""))) and "${{" not in str(
        step.get("working-directory", "")
    )


def _script_lines(script: str) -> list[str]:
    """A step's script as separate lines, or whole when it is compound shell."""
    lines = _logical_lines(script)
    return ["\n".join(lines)] if any(COMPOUND.match(line) for line in lines) else lines


def _commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line (split at `&&`, `||`, `;`, `|`), redirections left out."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return [line.split()]
    commands: list[list[str]] = [[]]
    redirect = False
    for token in tokens:
        if redirect:
            redirect = False  # a redirection's target is no word of the command
        elif set(token) <= set("&|;()"):
            commands.append([])
        elif set(token) <= set("<>&"):
            redirect = True
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def _program(words: list[str]) -> list[str]:
    """A command's words from its program on: variables assigned before it and wrappers peeled off."""
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    if not words:
        return []
    program = posixpath.basename(words[0])
    if program == "env":
        return _program(words[1:])
    if re.fullmatch(r"python[0-9.]*", program) and len(words) > 2 and words[1] == "-m":
        return _program(words[2:])
    if program in RUNNERS and len(words) > 2 and words[1] == RUNNERS[program]:
        rest = words[2:]
        while len(rest) > 1 and rest[0].startswith("-"):
            rest = rest[1:]
        return _program(rest)
    return [program, *words[1:]]


def _classify(words: list[str]) -> tuple[str, list[str]]:
    """What one command is ("test", "system", "root", "install", "noise", "build" or "setup") and the
    packages it installs, for "system" and "install"."""
    words = _program(words)
    if not words:
        return "noise", []
    program, args = words[0], words[1:]
    if program == "sudo":
        rest = _program([w for w in args if not w.startswith("-")])
        return ("system", _classify(rest)[1]) if rest[:1] and rest[0] in SYSTEM_TOOLS else ("root", [])
    if program in SYSTEM_TOOLS:
        packages = [w for w in args[1:] if not w.startswith("-")]
        return "system", packages if args[:1] == ["install"] else []
    pip = re.fullmatch(r"pip[0-9.]*", program) is not None
    if pip and args[:1] == ["install"]:
        return "install", _pip_packages(args[1:])
    if program == "uv" and args[:2] == ["pip", "install"]:
        return "install", _pip_packages(args[2:])
    uv_project = program == "uv" and args[:1] in (["sync"], ["add"])
    if uv_project or (args[:1] and args[0] in PROJECT_INSTALLERS.get(program, ())):
        return "install", []
    # Reports, style checks and the tools a workflow installs for itself (`pipx install tox`).
    if (
        program in NOISE
        or pip
        or program == "uv"
        or (program.startswith("python") and args[:1] == ["--version"])
    ):
        return "noise", []
    text = " ".join(words)
    if TEST_COMMAND.search(text) or (program in ("make", "hatch") and "test" in args[:1] + args[-1:]):
        return "test", []
    if program in MANAGERS:
        return "noise", []
    if DERIVES.search(text) or (program == "make" and any(GENERATING_TARGET.search(a) for a in args)):
        return "build", []
    return "setup", []


def _name(requirement: str) -> str | None:
    """The normalized package name a requirement line starts with, if any."""
    match = REQUIREMENT_NAME.match(requirement)
    return _normal(match[1]) if match else None


def _pip_packages(args: list[str]) -> list[str]:
    """The packages a `pip install` names; the project itself and requirements files are covered."""
    names: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in PIP_VALUE_OPTIONS or arg in PIP_COVERED_OPTIONS:
            skip = True
        elif not (arg.startswith(("-", ".", "/")) or "/" in arg) and _name(arg) not in TOOLS | {None}:
            names.append(arg)
    return names


def _classes(step: dict[str, Any]) -> set[str]:
    """What the commands of a step are (see _classify)."""
    return {_classify(words)[0] for line in _script_lines(step["run"]) for words in _commands(line)}


def _take_step(guess: InferredEnvironment, step: dict[str, Any], where: str, covered: set[str]) -> None:
    """A step before the test step: its lines as setup or build, its system packages as notes."""
    first = (step["run"].strip().splitlines() or [""])[0]
    name = step["name"] if isinstance(step.get("name"), str) else first
    where = f"{where}, step {name!r}"
    cd = f"cd {shlex.quote(str(step['working-directory']))} && " if step.get("working-directory") else ""
    lines: list[str] = []
    derives = False
    for line in _script_lines(step["run"]):
        kinds = [_classify(words) for words in _commands(line)]
        classes = {kind for kind, _ in kinds}
        system = [p for kind, packages in kinds if kind == "system" for p in packages]
        installs = [p for kind, packages in kinds if kind == "install" for p in packages]
        if system:
            guess.notes.append(
                f"needs {', '.join(system)} (system packages, {where}: `{line}`); install them on the "
                "machine that builds and runs the environment"
            )
        elif "root" in classes:
            guess.notes.append(f"needs root for `{line}` ({where}); rig runs no sudo: do it on the machine")
        elif "system" in classes:
            continue  # a package index refreshed, nothing installed
        elif "install" in classes:
            missing = [p for p in installs if _name(p) not in covered]
            if missing:
                guess.notes.append(
                    f"{where} installs {', '.join(missing)}, which no source above lists; add to a "
                    "requirements file, or a setup line "
                    f"`uv pip install --python bin/python {' '.join(shlex.quote(m) for m in missing)}`"
                )
        elif "GITHUB_" not in line and classes - {"noise"}:
            lines.append(cd + line)
            derives = derives or "build" in classes
    key = "build" if derives else "setup"
    target = guess.build if derives else guess.setup
    added = [line for line in lines if line not in target]
    if added:
        target.extend(added)
        what = "derives files from the sources" if derives else "runs before the tests"
        guess._why(key, f"{where}: {what}")

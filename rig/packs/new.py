"""`rig pack new`: a task pack scaffolded from a git repository.

The fixture is the repository's tracked files at HEAD, read from git's objects, never from the
work tree: untracked and ignored files and the .git folder stay out, and `export-ignore`
attributes (which `git archive` obeys, and which often name the tests) do not apply. pack.toml is
a best guess from what the repository holds: the hidden-test runner and the test files its
configuration names (read, never run), the gate, the protected paths, the docs, and for a Python
project its `[environment]` (rig.packs.infer_env). The example
task and its hidden test are placeholders that load (so `rig calibrate --pack` runs at once) and
fail until they are written. Everything is written to a temporary folder beside the target and
moved into place at the end: an error leaves nothing.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rig.confine.proc import BASE_PATH
from rig.confine.untrusted import read_text
from rig.packs.infer_env import InferredEnvironment, infer
from rig.packs.manifest import MANIFEST, PackError, load_pack
from rig.packs.tasks import TaskError, load_tasks
from rig.runners.base import Detection, Kind, Project, TestGlob
from rig.runners.registry import KINDS, kind_of
from rig.schema import PACK_NAME, RunnerKind
from rig.verify.checks import GATE_STAGE
from rig.workspace.bases import write_tree
from rig.workspace.build import WorkspaceError

EXAMPLE_TASK = "example"
DECOYS = ("todo_decoy_one", "todo_decoy_two")
# What the example task's placeholder hidden test fails with.
PLACEHOLDER_MESSAGE = "TODO: write the hidden tests of this task (docs/packs.md)"
# Top-level folders that hold a project's tests: protected whole, as `dirs`.
TEST_DIRS = ("tests", "test", "__tests__", "spec", "specs")
MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
# A package.json script run by node directly (no shell operators) becomes a `{node}` command.
SHELL_OPERATORS = re.compile(r"[|&;<>$`()*?]")
# A gate that prints the JSON report rig reads: it takes --json and names the report's keys.
JSON_GATE = (
    re.compile(r"--json\b"),
    re.compile(r"\bok\b"),
    re.compile(r"\bfailed\b"),
    re.compile(r"\bresults\b"),
)
GIT_TIMEOUT_S = 120
COMMENT_WIDTH = 100

# The rig runs a placeholder, so a pack not yet filled in fails with the reason instead of crashing.
TODO_COMMAND = "TODO: the command that checks the project"
TODO_GATE = ["sh", "-c", "echo 'TODO: set [gate] in pack.toml (docs/packs.md)' >&2; exit 2"]
TODO_RUNNER = [
    "sh",
    "-c",
    "echo 'TODO: set [runner] command in pack.toml: run the tests in $2, junit XML to $1' >&2; exit 2",
    "runner",
    "{junit}",
    "{tests}",
]


class ScaffoldError(Exception):
    """A pack that cannot be scaffolded; the message names the cause and the fix."""


@dataclass
class Detected:
    """What the repository says about itself: runner, gate and protected paths, with the evidence."""

    kind: RunnerKind
    runner_evidence: str
    gate_command: list[str]
    gate_run: list[str]
    gate_source: str
    report: str = "exit-code"
    gate_scripts: list[str] = field(default_factory=list)
    test_commands: list[list[str]] = field(default_factory=list)
    protect_files: list[str] = field(default_factory=list)
    protect_dirs: list[str] = field(default_factory=list)
    shadow_roots: list[str] = field(default_factory=list)
    docs: list[str] = field(default_factory=list)
    environment: InferredEnvironment | None = None
    """The guessed `[environment]`; None for a repository that is no Python project."""
    test_files: list[TestGlob] = field(default_factory=list)
    """`[runner] test_files`, read from the runner's configuration; empty for a kind that reads none."""

    @property
    def language(self) -> str:
        """pack.toml's `language`: the runner kind's."""
        return kind_of(self.kind).language


@dataclass
class Scaffold:
    """A pack written by `scaffold`: from what, and what was guessed."""

    name: str
    repo: Path
    commit: str
    files: int
    detected: Detected
    hidden_test: str
    wrote_agents_md: bool
    submodules: list[str]
    example: bool

    def summary(self, shown: str) -> str:
        """What was written and guessed, then the numbered steps left to the author.

        `shown` is PATH as the user gave it, so the last step can be pasted as it is.
        """
        d = self.detected
        tasks = (
            f"tasks/{EXAMPLE_TASK}/, hidden_tests/{EXAMPLE_TASK}/"
            if self.example
            else "tasks/, hidden_tests/"
        )
        lines = [
            f"wrote pack {self.name!r} at {shown}: fixture/ ({self.files} tracked files of {self.repo} "
            f"at {self.commit[:12]}), pack.toml, {tasks}",
            f"runner: {d.kind} ({d.runner_evidence})",
            *(
                [f"test files: {', '.join(g.glob for g in d.test_files)} ({_sources(d.test_files)})"]
                if d.test_files
                else []
            ),
            f"gate: {' '.join(d.gate_command)} ({d.gate_source}), report = {d.report!r}",
        ]
        if self.submodules:
            lines.append(f"not copied (git submodules): {', '.join(self.submodules)}")
        if d.environment is not None:
            for key, value in d.environment.values():
                why = "; ".join(d.environment.evidence.get(key, []))
                lines.append(f"environment: {key} = {toml_value(value)}" + (f" ({why})" if why else ""))
            lines += [f"environment note: {note}" for note in d.environment.notes]
        steps = [
            "Check every guess in pack.toml ([gate], [runner], [protect], docs; docs/packs.md explains "
            "each key). The gate and the hidden tests run in a scrubbed environment (a fresh HOME, PATH "
            f"{BASE_PATH}), from a copy of fixture/ alone: untracked files such as node_modules/ or a "
            "virtualenv were not copied, and " + _interpreter_note(d.environment),
        ]
        todo = [
            section
            for section, placeholder in (
                ("[gate]", d.gate_run == TODO_GATE),
                ("[runner]", kind_of(d.kind).takes_command),
            )
            if placeholder
        ]
        if todo:
            steps.append(f"Replace the TODO placeholder commands of {' and '.join(todo)} in pack.toml.")
        if self.wrote_agents_md:
            steps.append("Write fixture/AGENTS.md (a stub: the repository has none) or delete it.")
        if self.example:
            steps += [
                f"Rename tasks/{EXAMPLE_TASK}/ and hidden_tests/{EXAMPLE_TASK}/ to your task's id and fill "
                "in the TODO fields of its task.toml.",
                "Write setup.patch, solution.patch and the decoys/*.patch (rename them in task.toml too): "
                "git diffs made in a scratch git copy of fixture/.",
                f"Replace hidden_tests/{EXAMPLE_TASK}/{self.hidden_test} with hidden tests that fail on "
                "the baseline and pass on the solution; declare where each wrong state fails in task.toml.",
            ]
        else:
            steps.append(
                f"Mine tasks from the repository's history: rig task mine {shlex.quote(str(self.repo))} "
                f"--pack {shlex.quote(shown)} (docs/mining.md), or write them by hand (docs/packs.md)."
            )
        if d.environment is not None:
            steps.append(
                "Check the guessed [environment] in pack.toml and its notes above (docs/environments.md); "
                f"`rig env build {shlex.quote(shown)}` builds it again after a change."
            )
        steps.append(f"rig calibrate --pack {shlex.quote(shown)}")
        lines.append("next:")
        lines += [f"  {n}. {step}" for n, step in enumerate(steps, 1)]
        return "\n".join(lines)


def _git(repo: Path, *args: str) -> str:
    """Run git in `repo`; its output, or ScaffoldError with git's first line of complaint."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=GIT_TIMEOUT_S,
        )
    except FileNotFoundError:
        raise ScaffoldError("git is not installed; install git, then rerun") from None
    if proc.returncode != 0:
        first = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[0]
        raise ScaffoldError(f"{repo}: git {args[0]} failed ({first})")
    return proc.stdout.decode(errors="surrogateescape")


def repository_root(repo: Path) -> Path:
    """The top of the clean git work tree holding `repo`; ScaffoldError if there is none."""
    if not repo.is_dir():
        raise ScaffoldError(f"{repo}: no such folder; give a git repository with --from")
    try:
        top = _git(repo, "rev-parse", "--show-toplevel").strip()
    except ScaffoldError:
        raise ScaffoldError(f"{repo}: not a git work tree; give a git repository with --from") from None
    root = Path(top)
    try:
        _git(root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    except ScaffoldError:
        raise ScaffoldError(f"{root}: has no commit yet; commit the project first") from None
    # Untracked files are not part of the snapshot, so they do not make the repository dirty.
    changed = _git(root, "status", "--porcelain", "--untracked-files=no").splitlines()
    if changed:
        first = changed[0][3:]
        raise ScaffoldError(
            f"{root}: {len(changed)} uncommitted changes (first: {first}); commit or stash them first"
        )
    return root


def snapshot(root: Path, dest: Path) -> tuple[list[str], list[str]]:
    """Write the tracked files of `root` at HEAD into `dest`, read from git's objects.

    Returns the files written and the submodules left out (their commits live elsewhere).
    """
    try:
        return write_tree(["git", "-C", str(root)], "HEAD", dest)
    except WorkspaceError as exc:
        raise ScaffoldError(f"{root}: {exc}") from None


def _read(snap: Path, rel: str) -> str | None:
    """A tracked text file of the snapshot, or None (absent, a link, not text)."""
    return read_text(snap / rel)


def _package_scripts(snap: Path) -> dict[str, str]:
    """package.json's scripts (empty when it is absent or not valid JSON)."""
    text = _read(snap, "package.json")
    try:
        scripts = json.loads(text).get("scripts", {}) if text else {}
    except (ValueError, AttributeError):
        return {}
    return {k: v for k, v in scripts.items() if isinstance(v, str)} if isinstance(scripts, dict) else {}


def _make_targets(snap: Path) -> tuple[str | None, set[str]]:
    """The root Makefile (make's own order of preference) and the targets it defines."""
    for name in MAKEFILES:
        text = _read(snap, name)
        if text is not None:
            return name, set(re.findall(r"^([A-Za-z0-9_.-]+)\s*::?(?!=)", text, re.MULTILINE))
    return None, set()


def _is_json_gate(snap: Path, script: str) -> bool:
    """Whether a gate script prints rig's JSON report: it takes --json and names ok, failed, results."""
    text = _read(snap, script) or ""
    return all(pattern.search(text) for pattern in JSON_GATE)


def _node_run(snap: Path, files: list[str], body: str) -> tuple[list[str], list[str]] | None:
    """A package.json script `node ARGS` as `{node} ARGS`, with the tracked files it runs."""
    if SHELL_OPERATORS.search(body):
        return None
    try:
        words = shlex.split(body)
    except ValueError:
        return None
    if not words or words[0] != "node":
        return None
    return ["{node}", *words[1:]], [w for w in words[1:] if w in files]


def _runner_kind(project: Project) -> tuple[RunnerKind, Kind, Detection]:
    """The first registered runner kind that recognises the project, and why."""
    for name, kind in KINDS.items():
        detection = kind.detect(project)
        if detection is not None:
            return name, kind, detection
    raise ScaffoldError("no runner kind recognises the repository")


def detect(snap: Path, files: list[str]) -> Detected:
    """Guess the runner kind, the gate and the protected paths of the snapshot at `snap`."""
    scripts = _package_scripts(snap)
    makefile, targets = _make_targets(snap)
    project = Project(files, scripts, lambda rel: _read(snap, rel))
    name, kind, detection = _runner_kind(project)

    detected = Detected(name, detection.evidence, [TODO_COMMAND], TODO_GATE, "nothing found")
    if kind.project_test_files is not None:
        detected.test_files = kind.project_test_files(project)
    test_globs = [glob.glob for glob in detected.test_files]
    if "test" in scripts:
        detected.test_commands = [list(command) for command in kind.package_test_commands]
    if makefile and "test" in targets:
        detected.test_commands.append(["make", "test"])

    environment = infer(project, name == "pytest")
    # A Makefile's targets usually make or activate a virtualenv of their own; with a project
    # environment the runner's own gate runs in the one rig builds.
    makefile = None if environment is not None and kind.default_gate is not None else makefile
    # The first gate found: a check before a test, what the project declares before a runner default.
    if "check" in scripts:
        _npm_gate(
            detected, snap, files, ["npm", "run", "check"], scripts["check"], "package.json scripts.check"
        )
    elif makefile and "check" in targets:
        detected.gate_command, detected.gate_run = ["make", "check"], ["make", "check"]
        detected.gate_source = f"{makefile} target check"
    elif "test" in scripts:
        _npm_gate(detected, snap, files, ["npm", "test"], scripts["test"], "package.json scripts.test")
    elif makefile and "test" in targets:
        detected.gate_command, detected.gate_run = ["make", "test"], ["make", "test"]
        detected.gate_source = f"{makefile} target test"
    elif kind.default_gate is not None:
        guess = kind.default_gate
        detected.gate_command, detected.gate_run = list(guess.command), list(guess.run)
        detected.gate_source, detected.shadow_roots = guess.source, list(guess.shadow_roots)
        if environment is not None and not environment.is_node:
            detected.gate_source = f"{guess.source.split(',')[0]}, run by the [environment]'s interpreter"

    protect = set(detected.gate_scripts) | set(detection.protect)
    if detected.gate_command[0] == "make" and makefile:
        protect.add(makefile)
    if detected.gate_command[0] == "npm":
        protect.add("package.json")
    dirs = sorted({f.split("/", 1)[0] for f in files if "/" in f and f.split("/", 1)[0] in TEST_DIRS})
    for f in files:
        parts = PurePosixPath(f).parts
        if parts[0] in dirs:
            continue
        if (
            any(p in TEST_DIRS for p in parts[:-1])
            or any(other.is_test_file(parts[-1]) for other in KINDS.values())
            or (bool(test_globs) and kind.is_test(f, test_globs))
        ):
            protect.add(f)
    detected.protect_files = sorted(protect)
    detected.protect_dirs = dirs
    folders = {f.split("/", 1)[0] for f in files if "/" in f}
    detected.docs = ["README*", "CONTRIBUTING*", "AGENTS.md", "CLAUDE.md"] + [
        f"{d}/*" for d in ("docs", "doc") if d in folders
    ]
    detected.environment = environment
    return detected


def _npm_gate(
    detected: Detected, snap: Path, files: list[str], command: list[str], body: str, source: str
) -> None:
    """An npm script as the gate: run by the rig's node when it is plain `node ARGS`, else by npm."""
    detected.gate_command, detected.gate_run, detected.gate_source = command, list(command), source
    node = _node_run(snap, files, body)
    if node is None:
        return
    detected.gate_run, detected.gate_scripts = node
    if len(detected.gate_scripts) == 1 and _is_json_gate(snap, detected.gate_scripts[0]):
        detected.gate_run.append("--json")
        detected.report = "json"


def toml_value(value: object) -> str:
    """A TOML value for a string, a bool, a (nested) list of them or a table of strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        # Inline-table keys are written quoted: any string is then a valid key.
        return "{ " + ", ".join(f"{toml_value(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _comment(text: str) -> list[str]:
    """`text` as TOML comment lines of at most COMMENT_WIDTH characters."""
    return textwrap.wrap(text, COMMENT_WIDTH, initial_indent="# ", subsequent_indent="# ")


def manifest_text(name: str, repo: Path, commit: str, d: Detected) -> str:
    """pack.toml for the detected project, each guess commented with where it came from."""
    kind = kind_of(d.kind)
    adds = ", ".join(kind.protected_names) or "nothing"
    lines = [
        *_comment(
            f"{name}: a task pack scaffolded by `rig pack new` from {repo.name} at {commit[:12]}. "
            "Every value below is a guess to check; docs/packs.md explains each key."
        ),
        "",
        f"name = {toml_value(name)}",
        f"description = {toml_value('TODO: one line on the project')}",
        f"language = {toml_value(d.language)}",
        'fixture = "fixture"',
        'tasks = "tasks"',
        'hidden_tests = "hidden_tests"',
        f"docs = {toml_value(d.docs)}",
        'context_files = ["AGENTS.md", "CLAUDE.md", "GEMINI.md"]',
        "",
        "[gate]",
        *_comment(
            f"Guessed from {d.gate_source}. command: what the project's docs tell a person to run; "
            "run: what the rig runs in the workspace ({python}: "
            + (
                "the [environment]'s interpreter"
                if d.environment is not None and not d.environment.is_node
                else "the rig's interpreter"
            )
            + ", {node}: its node), in a scrubbed environment"
            + (
                " with the [environment]'s node_modules/.bin first on PATH"
                if d.environment is not None and d.environment.is_node
                else ""
            )
            + ". It must pass on the clean fixture."
        ),
        f"command = {toml_value(d.gate_command)}",
        f"run = {toml_value(d.gate_run)}",
    ]
    if d.report == "json":
        lines += [
            "# The script takes --json: its last stdout line must be",
            '# {"ok": bool, "failed": [stage, ...], "results": {stage: [problem, ...]}}.',
            'report = "json"',
            "# TODO: the JSON report's stages, in fixing order.",
            "stages = []",
        ]
    else:
        lines += ['# Only the exit code counts; a failure is stage "gate".', 'report = "exit-code"']
    if d.gate_scripts:
        lines.append(f"scripts = {toml_value(d.gate_scripts)}")
    lines += ["", "[runner]", *_comment(f"Detected: {d.runner_evidence}."), f"kind = {toml_value(d.kind)}"]
    if kind.takes_command:
        lines += [
            "# TODO: a command that runs the hidden tests in {tests} and writes junit XML to {junit}.",
            f"command = {toml_value(TODO_RUNNER)}",
        ]
    if d.test_commands:
        lines.append(f"test_commands = {toml_value(d.test_commands)}")
    if d.test_files:
        lines += test_files_lines(d.test_files)
    lines += [
        "",
        "[protect]",
        *_comment(
            f"The gate's files and the tests found. The {d.kind} runner kind protects these names "
            f"wherever they appear, too: {adds}."
        ),
        f"files = {toml_value(d.protect_files)}",
        f"dirs = {toml_value(d.protect_dirs)}",
    ]
    if d.shadow_roots:
        lines += [
            "# `python -m` puts the workspace root first on sys.path: no module there may shadow another.",
            f"shadow_roots = {toml_value(d.shadow_roots)}",
        ]
    if d.environment is not None:
        lines += environment_lines(d.environment)
    lines += [
        "",
        "[source]",
        "# What fixture/ is a snapshot of: `rig task mine` turns fixes in this commit's history into tasks.",
        f"repo = {toml_value(repo.name)}",
        f"commit = {toml_value(commit)}",
    ]
    return "\n".join(lines) + "\n"


def _sources(globs: list[TestGlob]) -> str:
    """Where the globs came from, each place once."""
    return "; ".join(dict.fromkeys(glob.source for glob in globs))


def test_files_lines(globs: list[TestGlob]) -> list[str]:
    """`[runner] test_files`, each glob after a comment saying where it came from (once for a run
    of globs from the same place)."""
    lines = [
        *_comment(
            "The project's test files, as its runner's configuration names them: globs from the fixture "
            "root, `**` spanning folders, `!` excluding. `rig task mine` takes a commit's tests from them."
        ),
        "test_files = [",
    ]
    source = None
    for glob in globs:
        if glob.source != source:
            source = glob.source
            lines += [f"    {line}" for line in _comment(source)]
        lines.append(f"    {toml_value(glob.glob)},")
    return [*lines, "]"]


def _interpreter_note(env: InferredEnvironment | None) -> str:
    """What {python} and PATH are in the gate of a pack with the guessed `env`."""
    if env is None:
        return "{python} is the rig's own interpreter."
    if env.is_node:
        return (
            "every tree gets node_modules links into the [environment]'s, its node_modules/.bin first "
            "on PATH ({python} is the rig's own interpreter)."
        )
    return "{python} is the [environment]'s interpreter, its bin first on PATH."


def environment_lines(env: InferredEnvironment) -> list[str]:
    """pack.toml's `[environment]` table: each guessed key after a comment naming its evidence, then
    the notes as TODO comments."""
    what = (
        f"The project's node environment (node_modules from its lockfile, installed by {env.manager})"
        if env.is_node
        else "The project's Python environment"
    )
    setup_root = (
        "its project/ folder, a copy of the fixture emptied afterwards of all but node_modules and "
        "what the package manager reads"
        if env.is_node
        else "the environment's root"
    )
    lines = [
        "",
        "[environment]",
        *_comment(
            f"{what}, guessed from the repository's files; `rig env build` builds it "
            f"(docs/environments.md explains each key). setup lines run once at {setup_root}, build "
            "lines at the root of every tree a run gets."
        ),
    ]
    for key, value in env.values():
        why = env.evidence.get(key)
        if why:
            lines += _comment("; ".join(why) + ".")
        if isinstance(value, list) and len(value) > 1 and key in ("setup", "build"):
            lines += [f"{key} = [", *(f"    {toml_value(v)}," for v in value), "]"]
        else:
            lines.append(f"{key} = {toml_value(value)}")
    for note in env.notes:
        lines += _comment(f"TODO: {note}.")
    return lines


def task_text(kind: RunnerKind, test_id: str) -> str:
    """The example task.toml: every field a placeholder that validates, marked TODO."""
    decoys = "\n".join(
        f"[decoys.{name}]\n"
        f'reason = "TODO: the plausible wrong solution decoys/{name}.patch stands for"\n'
        "fails_stages = []\n"
        "fails_hidden = []\n"
        for name in DECOYS
    )
    return (
        "# TODO: every value here is a placeholder (docs/packs.md, Tasks). Rename this folder and\n"
        f"# hidden_tests/{EXAMPLE_TASK}/ to the task's id (lowercase letters, digits, _) and set id to it.\n"
        f'id = "{EXAMPLE_TASK}"\n'
        'hypothesis = "TODO: the harness component this task measures (e.g. AGENTS.md: the real gate)"\n'
        "timeout_s = 900\n"
        'prompt = """\n'
        "TODO: what the agent is asked to do, as a user would ask it.\n"
        '"""\n\n'
        '# Where the fixture with setup.patch applied fails: gate stages (with report = "exit-code"\n'
        f'# the only one is "{GATE_STAGE}") and hidden test ids (for the {kind} runner: {test_id}).\n'
        "[baseline]\n"
        "fails_stages = []\n"
        "fails_hidden = []\n\n"
        "# One table per decoys/<name>.patch (at least two): a plausible wrong solution and where it fails.\n"
        f"{decoys}"
    )


def agents_md_text(gate: list[str]) -> str:
    """The stub AGENTS.md for a repository without one."""
    return (
        "# AGENTS.md\n\n"
        "TODO: what an agent working on this project should know (written by `rig pack new`: the\n"
        "repository has no AGENTS.md; experiments compare agents with and without it).\n\n"
        f"Before you finish, run `{' '.join(gate)}`: it must pass.\n"
    )


def default_name(repo: Path) -> str:
    """A pack name from the repository folder's: lowercased, other characters as `-`."""
    return re.sub(r"[^a-z0-9_.-]+", "-", repo.name.lower()).lstrip("_.-")


def _check_target(path: Path, repo: Path, force: bool) -> None:
    """Refuse a target that holds something (unless `force`), is a file, or would hold the repo."""
    if path.exists() and not path.is_dir():
        raise ScaffoldError(f"{path}: exists and is not a folder; give a new or empty folder")
    if not path.parent.is_dir():
        raise ScaffoldError(f"{path.parent}: no such folder; create it first")
    if path == repo or path in repo.parents:
        raise ScaffoldError(f"{path}: holds the repository {repo}; give a folder outside it")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise ScaffoldError(f"{path}: exists and is not empty; give a new folder, or --force to replace it")


def scaffold(
    path: Path,
    repo: Path,
    name: str | None = None,
    force: bool = False,
    example: bool = True,
    setup: Sequence[str] = (),
    build: Sequence[str] = (),
) -> Scaffold:
    """Write a pack at `path` from the git repository at `repo`; see the module docstring.

    `setup` and `build` are the author's own `[environment]` lines, added after the guessed ones.
    Raises ScaffoldError (one line) with nothing written when the repository or the target will not do.
    """
    for flag, lines in (("--setup", setup), ("--build", build)):
        if any(not line.strip() for line in lines):
            raise ScaffoldError(f"{flag}: an empty line; give a shell command, or leave {flag} out")
    given = path.expanduser().absolute()
    if given.is_symlink():
        raise ScaffoldError(f"{given}: is a symbolic link; give a new or empty folder")
    # The parent resolved, the name kept: a target is compared with the repository by real path.
    path = given.parent.resolve() / given.name
    root = repository_root(repo.expanduser().resolve())
    name = name if name is not None else default_name(root)
    if not re.match(PACK_NAME, name):
        raise ScaffoldError(
            f"pack name {name!r} is not valid (lowercase letters, digits, '.', '_', '-'); "
            "give one with --name"
        )
    _check_target(path, root, force)
    commit = _git(root, "rev-parse", "HEAD").strip()
    # Beside the target, so the last step is a rename; the pack is a folder made inside it, with the
    # user's umask (mkdtemp's own folder is private).
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        work = staging / "pack"
        work.mkdir()
        made = _write(work, name, root, commit, example, list(setup), list(build))
        _check_loads(work, example)
        _move_into_place(work, path, staging)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise ScaffoldError(
            f"{where}{exc.strerror or exc}; fix that (free space? permissions?), then rerun"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return made


def _write(
    work: Path, name: str, root: Path, commit: str, example: bool, setup: list[str], build: list[str]
) -> Scaffold:
    """The whole pack, written into the empty folder `work`; without `example`, empty tasks and
    hidden tests folders (for `rig task mine`). `setup` and `build` go into `[environment]`."""
    fixture = work / "fixture"
    fixture.mkdir()
    files, submodules = snapshot(root, fixture)
    detected = detect(fixture, files)
    if (setup or build) and detected.environment is None:
        # The author asked for lines in a repository that is no Python project: nothing to install.
        detected.environment = InferredEnvironment(project=False)
        detected.environment.evidence["project"] = ["no Python project found: nothing to install"]
    if detected.environment is not None:
        detected.environment.add_lines(setup, build)
    wrote_agents_md = not os.path.lexists(fixture / "AGENTS.md")
    if wrote_agents_md:
        (fixture / "AGENTS.md").write_text(agents_md_text(detected.gate_command), encoding="utf-8")
    (work / MANIFEST).write_text(manifest_text(name, root, commit, detected), encoding="utf-8")
    placeholder = kind_of(detected.kind).placeholder(PLACEHOLDER_MESSAGE)
    made = Scaffold(
        name, root, commit, len(files), detected, placeholder.name, wrote_agents_md, submodules, example
    )
    if not example:
        (work / "tasks").mkdir()
        (work / "hidden_tests").mkdir()
        return made
    task_dir = work / "tasks" / EXAMPLE_TASK
    (task_dir / "decoys").mkdir(parents=True)
    (task_dir / "task.toml").write_text(task_text(detected.kind, placeholder.test_id), encoding="utf-8")
    for patch in ("setup.patch", "solution.patch", *(f"decoys/{d}.patch" for d in DECOYS)):
        (task_dir / patch).touch()
    hidden = work / "hidden_tests" / EXAMPLE_TASK
    hidden.mkdir(parents=True)
    (hidden / placeholder.name).write_text(placeholder.content, encoding="utf-8")
    return made


def _check_loads(work: Path, example: bool) -> None:
    """The scaffold loads as a pack (with its example task): a placeholder that does not is a rig bug."""
    try:
        pack = load_pack(work)
        if example:
            load_tasks(pack)
    except (PackError, TaskError) as exc:
        raise ScaffoldError(f"the scaffold does not load ({exc}); report this as a rig bug") from None


def _move_into_place(work: Path, path: Path, staging: Path) -> None:
    """Rename `work` to `path`; a non-empty `path` (--force) is set aside into `staging` first,
    and put back if the rename fails or is interrupted (the caller removes `staging`)."""
    if not path.exists() or not any(path.iterdir()):
        # rename(2) replaces an empty directory.
        os.replace(work, path)
        return
    old = staging / "old"
    os.replace(path, old)
    try:
        os.replace(work, path)
    except BaseException:
        os.replace(old, path)
        raise

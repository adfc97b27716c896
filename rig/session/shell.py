"""Harness-neutral analysis of the shell commands an agent ran.

Every adapter records bash commands as strings; these functions answer the questions a record
asks of them (did the agent search, run the gate, run the tests, read which files) the same way for
every harness. What the gate, the tests and the docs are comes from the task's pack: adapters parse
without it, and `judge` fills the pack's fields once the engine has the task. The analysis is
lexical, never executes anything and never raises: a command that shlex cannot parse falls back to
a whitespace split.

A command line is cut into simple commands at `&&`, `||`, `;`, `|`, `&` and newlines. Wrappers
that run the rest of their arguments as a command (`env X=1`, `timeout 60`, `nice`, `time`,
`uv run`, `poetry run`, ...) are peeled off, the string of `bash -c`, `sh -lc` or `eval` is
analysed as commands of its own (one level deep), and `cd` is followed from one command to the
next (subshell scopes are not), so `cd sub && python ../<gate>` runs the gate.
"""

import posixpath
import re
import shlex
from fnmatch import fnmatchcase

from rig.runners.argv import NODE, PYTHON, node_target, python_target
from rig.runners.pytest import PYTEST
from rig.runners.registry import kind_of
from rig.schema import GateSpec, Metrics, PackSpec, RunnerSpec

# Newline separates commands like `;`, so it is lexed as punctuation rather than whitespace.
_PUNCTUATION = "();<>|&\n"
_WHITESPACE = " \t\r"
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# `2>file` and `2>&1`: the descriptor number is not an argument of the command.
_FD_REDIRECT = re.compile(r"(^|[\s;|&(])\d+(?=[<>])")
_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
_LINE_CONTINUATION = "\\\n"
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
# One level of `bash -c "..."` covers what agents write; deeper nesting is left unanalysed.
_MAX_NESTING = 1
# A chain of wrappers longer than this is left as it is (bounded work on hostile input).
_MAX_WRAPPERS = 8
# The working directory where a command line starts: the directory its paths are relative to.
_START = "."

_SEARCH_PROGRAMS = frozenset(
    {"grep", "egrep", "fgrep", "rg", "ag", "ack", "find", "fd", "fdfind", "ls", "tree"}
)
_GIT_SEARCH = frozenset({"grep", "ls-files"})
_GIT_VALUE_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"})

# Wrappers that run their operands as a command: the options of each that take a separate value.
_WRAPPERS = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "nohup": frozenset(),
    "exec": frozenset({"-a"}),
    "builtin": frozenset(),
    "command": frozenset(),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "--class", "-n", "--classdata", "-p", "--pid", "-P", "--pgid", "-u", "--uid"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
}
# Wrappers whose first operand is not the command: `timeout 60 cmd`.
_WRAPPER_OPERANDS = {"timeout": 1}
# Options that change the directory the wrapped command runs in.
_CHDIR_OPTIONS = frozenset({"-C", "--chdir", "--directory", "--cwd"})
# `command -v x` and `command -V x` only describe x; they do not run it.
_DESCRIBE_OPTIONS = frozenset({"-v", "-V"})
# Project runners, `<tool> [options] run [options] command...`: the options of each that take a
# separate value (before or after `run`).
_RUNNERS = {
    "uv": frozenset(
        {
            "--with",
            "--with-editable",
            "--with-requirements",
            "-p",
            "--python",
            "--project",
            "--directory",
            "--package",
            "--extra",
            "--group",
            "--only-group",
            "--no-group",
            "--env-file",
            "--index",
            "--default-index",
            "-i",
            "--index-url",
            "--extra-index-url",
            "-f",
            "--find-links",
            "--cache-dir",
            "--config-file",
            "--color",
        }
    ),
    "poetry": frozenset({"-C", "--directory", "-P", "--project"}),
    "pipenv": frozenset({"--python"}),
    "pdm": frozenset({"-p", "--project", "--venv"}),
    "rye": frozenset({"--pyproject"}),
    "hatch": frozenset({"-e", "--env"}),
    "conda": frozenset({"-n", "--name", "-p", "--prefix", "--cwd"}),
    "mamba": frozenset({"-n", "--name", "-p", "--prefix", "--cwd"}),
    "micromamba": frozenset({"-n", "--name", "-p", "--prefix", "--cwd"}),
}
# `uv run -m pytest`: the runner's own option for running a module.
_RUNNER_MODULE_OPTIONS = frozenset({"-m", "--module"})

_READERS = frozenset({"cat", "head", "tail", "less", "more", "bat", "nl"})
# Options of the readers above that take a separate value, which is not a file to read.
_READER_VALUE_OPTIONS = {
    "head": frozenset({"-n", "-c", "--lines", "--bytes"}),
    "tail": frozenset({"-n", "-c", "--lines", "--bytes", "-s", "--sleep-interval", "--pid"}),
    "bat": frozenset(
        {"-l", "--language", "-r", "--line-range", "-H", "--highlight-line", "--style", "--theme", "-m"}
    ),
    "nl": frozenset({"-b", "-d", "-f", "-h", "-i", "-l", "-n", "-s", "-v", "-w"}),
    "less": frozenset({"-b", "-h", "-j", "-k", "-o", "-O", "-p", "-P", "-t", "-T", "-x", "-y", "-z"}),
}
_SED_SCRIPT_OPTIONS = frozenset({"-e", "--expression", "-f", "--file"})
# How coreutils, sed, less and bat report a file they could not print (`cat: x: No such file or
# directory`, `head: cannot open 'x' for reading: ...`, `[bat error]: 'x': ... (os error 2)`).
_UNREADABLE = re.compile(
    r"no such file or directory|is a directory|not a directory|permission denied", re.IGNORECASE
)

_SKILL_FILE = "SKILL.md"

# One program to analyse: its argv, and the directory it runs in relative to where the command
# line started (None: a `cd` somewhere the analysis cannot follow).
_Program = tuple[list[str], str | None]


def segments(command: str) -> list[list[str]]:
    """The argv of each simple command in `command`, in order.

    Pipelines, lists (`|`, `||`, `&&`, `;`, `&`, newlines) and subshell parentheses separate
    commands; leading `NAME=value` assignments and redirections are dropped; one level of
    `bash -c "..."`, `sh -c "..."` or `eval ...` is replaced by the commands inside it.
    """
    return _segments(command, 0)


def is_search(command: str) -> bool:
    """Whether any command in `command` searches or lists the tree (grep, rg, find, ls, git grep...)."""
    for argv, _ in _programs(command):
        name = posixpath.basename(argv[0])
        if name in _SEARCH_PROGRAMS:
            return True
        if name == "git" and _git_subcommand(argv) in _GIT_SEARCH:
            return True
    return False


def runs_gate(command: str, gate: GateSpec) -> bool:
    """Whether any command in `command` runs the pack's gate (not cat, grep or echo of it).

    The gate runs as its docs spell it (`gate.command`: the same program, the gate's arguments in
    order, options between them and anything after them allowed, so `npm run --silent check --
    --json` runs `npm run check`), or through one of its script files (`gate.scripts`): by path
    (`./<script>`), through an interpreter (`python3 -u <script>`, `node <script>`, `cd sub && python
    ../<script>`) or as a Python module (`python -m <script as a module>`), behind any wrapper the
    module docstring names.
    """
    for argv, cwd in _programs(command):
        if _runs_command(argv, gate.command):
            return True
        if gate.scripts and any(_is_script(path, cwd, gate.scripts) for path in _script_paths(argv)):
            return True
    return False


def runs_tests(command: str, runner: RunnerSpec) -> bool:
    """Whether any command in `command` runs the pack's tests: its runner kind's own command
    (pytest: `pytest`, `py.test`, `python -m pytest`; node-test: `node --test ...`) or one of
    `runner.test_commands`, matched as `runs_gate` matches the gate's command."""
    kind = kind_of(runner.kind)
    return any(
        kind.runs_tests(argv) or any(_runs_command(argv, expected) for expected in runner.test_commands)
        for argv, _ in _programs(command)
    )


def runs_pytest(command: str) -> bool:
    """Whether any command in `command` runs pytest (`pytest`, `py.test` or `python -m pytest`),
    whatever the pack's runner kind: the record's `ran_pytest`."""
    return any(PYTEST.runs_tests(argv) for argv, _ in _programs(command))


def read_paths(command: str, output: str | None = None) -> list[str]:
    """Files that `command` prints: arguments of cat, head, tail, less, more, bat, nl and `sed -n`.

    Paths are resolved against the `cd`s before them and normalised (`./` and `x/..` removed),
    relative to where the command started unless written absolute; in order, duplicates kept.
    With `output`, what the command printed, a path the output reports as unreadable (`cat: x: No
    such file or directory`, `Is a directory`, `Permission denied`) is left out: it was not read.
    A failure whose message went elsewhere (`2>/dev/null`) cannot be seen, and the path stays.
    """
    errors = [line for line in output.splitlines() if _UNREADABLE.search(line)] if output else []
    paths: list[str] = []
    for argv, cwd in _programs(command):
        name = posixpath.basename(argv[0])
        if name in _READERS:
            operands = _operands(argv[1:], _READER_VALUE_OPTIONS.get(name, frozenset()))
        elif name == "sed":
            operands = _sed_read_paths(argv[1:])
        else:
            continue
        for operand in operands:
            if operand != "-" and not _reported_unreadable(operand, errors):
                paths.append(_resolve(cwd, operand) or _normalise(operand))
    return paths


def is_doc(path: str, patterns: list[str]) -> bool:
    """Whether a workspace-relative path is documentation: it matches one of the pack's `docs`
    glob patterns, where `*` crosses folders (`docs/*` holds `docs/sub/page.md`)."""
    path = _normalise(path)
    return any(fnmatchcase(path, pattern) for pattern in patterns)


def is_skill(path: str) -> bool:
    """Whether a path is a skill definition (a file named SKILL.md)."""
    return posixpath.basename(path) == _SKILL_FILE


def judge(metrics: Metrics, pack: PackSpec) -> Metrics:
    """`metrics` with the fields only the task's pack can decide: `docs_read` (read paths that are
    the pack's docs), `ran_check_script` (a shell command ran the gate) and `ran_tests` (one ran the
    pack's tests). What a parser recorded is left as it is."""
    return metrics.model_copy(
        update={
            "docs_read": [p for p in metrics.read_paths if is_doc(p, pack.docs)],
            "ran_check_script": any(runs_gate(c, pack.gate) for c in metrics.bash_commands),
            "ran_tests": any(runs_tests(c, pack.runner) for c in metrics.bash_commands),
        }
    )


def _segments(command: str, depth: int) -> list[list[str]]:
    result: list[list[str]] = []
    for argv in _split(command):
        argv = _drop_assignments(argv)
        if not argv:
            continue
        inner = _shell_c_command(argv)
        if inner is not None and depth < _MAX_NESTING:
            result.extend(_segments(inner, depth + 1))
        else:
            result.append(argv)
    return result


def _drop_assignments(argv: list[str]) -> list[str]:
    while argv and _ASSIGNMENT.match(argv[0]):
        argv = argv[1:]
    return argv


def _split(command: str) -> list[list[str]]:
    """Lex `command` and cut the tokens into simple commands at separators."""
    text = _strip_heredocs(command.replace(_LINE_CONTINUATION, " "))
    text = _FD_REDIRECT.sub(r"\1", text)
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=_PUNCTUATION)
        lexer.whitespace = _WHITESPACE
        lexer.whitespace_split = True
        # Comments are cut per command below: shlex's own comment handling would swallow the
        # newline that separates the commented command from the next one.
        lexer.commenters = ""
        tokens = list(lexer)
    except ValueError:
        tokens = re.findall(r"[^\s;|&()]+|[;|&()\n]+", text)
    commands: list[list[str]] = []
    current: list[str] = []
    skip_next = in_comment = False
    for token in tokens:
        is_punct = all(ch in _PUNCTUATION for ch in token)
        if is_punct and not any(ch in "<>" for ch in token):
            commands.append(current)
            current, skip_next, in_comment = [], False, False
        elif in_comment:
            continue
        elif is_punct:
            # A redirection: its target is not an argument. `>&2` has its target in the token
            # stream too, so it is dropped the same way.
            skip_next = True
        elif skip_next:
            skip_next = False
        elif token.startswith("#"):
            in_comment = True
        else:
            current.append(token)
    commands.append(current)
    return [argv for argv in commands if argv]


def _strip_heredocs(text: str) -> str:
    """Drop here-document bodies: their lines are data for a command, not commands."""
    if "<<" not in text:
        return text
    out: list[str] = []
    pending: list[tuple[str, bool]] = []
    for line in text.split("\n"):
        if pending:
            delimiter, strip_tabs = pending[0]
            if (line.lstrip("\t") if strip_tabs else line).strip() == delimiter:
                pending.pop(0)
            continue
        out.append(line)
        for match in _HEREDOC.finditer(line.replace("<<<", "")):
            pending.append((match.group(3), match.group(1) == "-"))
    return "\n".join(out)


def _shell_c_command(argv: list[str]) -> str | None:
    """The command string of `bash -c "..."` (also `sh -lc`, `bash -ec`) or `eval ...`, else None."""
    name = posixpath.basename(argv[0])
    if name == "eval":
        return " ".join(argv[1:])
    if name not in _SHELLS:
        return None
    seen_c = False
    for arg in argv[1:]:
        if seen_c and not arg.startswith("-"):
            return arg
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            seen_c = True
        elif not arg.startswith("-"):
            return None
    return None


def _programs(command: str, cwd: str | None = _START, depth: int = 0) -> list[_Program]:
    """Each program `command` runs, wrappers peeled off, with the directory it runs in."""
    result: list[_Program] = []
    for argv in _split(command):
        argv, where = _unwrap(_drop_assignments(argv), cwd)
        if not argv:
            continue
        name = posixpath.basename(argv[0])
        inner = _shell_c_command(argv)
        if inner is not None and depth < _MAX_NESTING:
            result.extend(_programs(inner, where, depth + 1))
        elif name in ("cd", "pushd"):
            cwd = _cd(where, argv[1:])
        elif name == "popd":
            cwd = None
        else:
            result.append((argv, where))
    return result


def _unwrap(argv: list[str], cwd: str | None) -> _Program:
    """The command a chain of wrappers runs, and its directory (`env -C`, `uv run --directory`)."""
    for _ in range(_MAX_WRAPPERS):
        if not argv:
            break
        name = posixpath.basename(argv[0])
        if name in _WRAPPERS:
            if name == "command" and argv[1:2] and argv[1] in _DESCRIBE_OPTIONS:
                return [], cwd
            argv, cwd = _skip_options(argv[1:], _WRAPPERS[name], cwd, assignments=name == "env")
            argv = argv[_WRAPPER_OPERANDS.get(name, 0) :]
        elif name in _RUNNERS:
            rest, cwd = _skip_options(argv[1:], _RUNNERS[name], cwd)
            if not rest or rest[0] != "run":
                break
            argv, cwd = _skip_options(rest[1:], _RUNNERS[name], cwd, stop=_RUNNER_MODULE_OPTIONS)
            option, eq, module = argv[0].partition("=") if argv else ("", "", "")
            if option in _RUNNER_MODULE_OPTIONS:
                # `uv run -m pytest -q` runs `python -m pytest -q`.
                argv = ["python", "-m", *([module] if eq else []), *argv[1:]]
        else:
            break
    return argv, cwd


def _skip_options(
    args: list[str],
    value_options: frozenset[str],
    cwd: str | None,
    assignments: bool = False,
    stop: frozenset[str] = frozenset(),
) -> _Program:
    """`args` from the first operand (or an option in `stop`) on, past the options before it (and
    `NAME=value` pairs for env), and the directory those options leave the command in."""
    i = 0
    while i < len(args):
        arg = args[i]
        key, eq, value = arg.partition("=")
        if arg == "--":
            i += 1
            break
        if key in stop:
            break
        if arg.startswith("-") and eq and key in value_options:
            cwd = _cd(cwd, [value]) if key in _CHDIR_OPTIONS else cwd
            i += 1
        elif arg in value_options:
            if arg in _CHDIR_OPTIONS and i + 1 < len(args):
                cwd = _cd(cwd, [args[i + 1]])
            i += 2
        elif (arg.startswith("-") and arg != "-") or (assignments and _ASSIGNMENT.match(arg)):
            i += 1
        else:
            break
    return args[i:], cwd


def _cd(cwd: str | None, args: list[str]) -> str | None:
    """The directory after `cd args` from `cwd`; None where it cannot be known (`cd`, `cd ~`, `cd $X`)."""
    operands = [a for a in args if not (a.startswith("-") and a != "-")]
    if not operands or operands[0] == "-" or operands[0][:1] in ("~", "$"):
        return None
    return _resolve(cwd, operands[0])


def _resolve(cwd: str | None, path: str) -> str | None:
    """`path` as seen from where the command line started; None when `cwd` is unknown."""
    if path.startswith("/"):
        return posixpath.normpath(path)
    if cwd is None:
        return None
    return posixpath.normpath(posixpath.join(cwd, path))


def _git_subcommand(argv: list[str]) -> str | None:
    args = argv[1:]
    while args:
        arg = args[0]
        if arg in _GIT_VALUE_OPTIONS:
            args = args[2:]
        elif arg.startswith("-"):
            args = args[1:]
        else:
            return arg
    return None


def _same_program(written: str, expected: str) -> bool:
    """Whether the program `written` is the program `expected` names: the same basename, or two
    Python interpreters (`python3` runs what docs spell `python`); a program named by its path
    (`./gate.sh`) only by that path."""
    if "/" in expected:
        return posixpath.normpath(written) == posixpath.normpath(expected)
    name, wanted = posixpath.basename(written), posixpath.basename(expected)
    return name == wanted or bool(PYTHON.match(name) and PYTHON.match(wanted))


def _runs_command(argv: list[str], expected: list[str]) -> bool:
    """Whether `argv` runs the command line `expected`: the same program, then each of its
    arguments in order with only options (`--silent`) between them; anything may follow."""
    if not _same_program(argv[0], expected[0]):
        return False
    wanted = iter(expected[1:])
    arg = next(wanted, None)
    for token in argv[1:]:
        if arg is None:
            break
        if _normalise(token) == _normalise(arg):
            arg = next(wanted, None)
        elif not (token.startswith("-") and token != "-"):
            # An operand the expected command does not have: another subcommand or script.
            return False
    return arg is None


def _script_paths(argv: list[str]) -> list[str]:
    """The file `argv` executes: its program itself, or the script an interpreter (Python, node or a
    shell) runs; a Python module as the file it would be (`-m pkg.mod` -> `pkg/mod.py`)."""
    paths = [argv[0]]
    name = posixpath.basename(argv[0])
    if PYTHON.match(name):
        kind, target = python_target(argv[1:])
        if kind == "script" and target is not None:
            paths.append(target)
        elif kind == "module" and target is not None:
            paths.append(target.replace(".", "/") + ".py")
    elif name in NODE:
        target = node_target(argv[1:])[1]
        if target is not None:
            paths.append(target)
    elif name in _SHELLS:
        target = _shell_script(argv[1:])
        if target is not None:
            paths.append(target)
    return paths


def _shell_script(args: list[str]) -> str | None:
    """The script file `bash [options] script` runs (None for `-c` code or an interactive shell)."""
    for arg in args:
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            return None
        if not arg.startswith("-"):
            return arg
    return None


def _is_script(path: str, cwd: str | None, scripts: list[str]) -> bool:
    """Whether `path` names one of the gate's `scripts`: as written (the agent's shell may have
    stood anywhere), or resolved against the `cd`s before it (`cd sub && python ../<script>`)."""
    written = posixpath.normpath(path)
    resolved = _resolve(cwd, path)
    for script in scripts:
        script = posixpath.normpath(script)
        if written == script or (written.startswith("/") and written.endswith("/" + script)):
            return True
        if resolved is None:
            # After a `cd` the analysis cannot follow, the path's own shape has to do.
            if written.endswith("/" + script):
                return True
        elif resolved == script:
            return True
    return False


def _reported_unreadable(path: str, error_lines: list[str]) -> bool:
    """Whether an error line of the output names `path` (as written, maybe quoted) as unreadable."""
    if not error_lines:
        return False
    named = re.compile(r"(?:^|[\s'\"`:\u2018])" + re.escape(path) + r"(?=['\"`:\u2019]|\s|$)")
    return any(named.search(line) for line in error_lines)


def _operands(args: list[str], value_options: frozenset[str]) -> list[str]:
    """Non-option arguments, skipping the values of options that take one."""
    operands: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            operands.extend(args[i + 1 :])
            break
        if arg in value_options:
            i += 2
            continue
        if not (arg.startswith("-") and arg != "-") and not arg.startswith("+"):
            operands.append(arg)
        i += 1
    return operands


def _sed_read_paths(args: list[str]) -> list[str]:
    """The file `sed -n` prints from: its last operand, when a script precedes it."""
    quiet = any(a in ("-n", "--quiet", "--silent") or re.match(r"^-[a-zA-Z]*n[a-zA-Z]*$", a) for a in args)
    in_place = any(a.startswith("-i") or a.startswith("--in-place") for a in args)
    if not quiet or in_place:
        return []
    has_script_option = any(a in _SED_SCRIPT_OPTIONS for a in args)
    operands = _operands(args, _SED_SCRIPT_OPTIONS)
    needed = 1 if has_script_option else 2
    return [operands[-1]] if len(operands) >= needed else []


def _normalise(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    return path

"""Harness-neutral analysis of the shell commands an agent ran.

Every adapter records bash commands as strings; these functions answer the questions a record
asks of them (did the agent search, run the gate, run pytest, read which files) the same way for
every harness. The analysis is lexical, never executes anything and never raises: a command that
shlex cannot parse falls back to a whitespace split.
"""

import posixpath
import re
import shlex

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

_SEARCH_PROGRAMS = frozenset(
    {"grep", "egrep", "fgrep", "rg", "ag", "ack", "find", "fd", "fdfind", "ls", "tree"}
)
_GIT_SEARCH = frozenset({"grep", "ls-files"})
_GIT_VALUE_OPTIONS = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"})
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
# Long interpreter options that consume the next argument.
_PYTHON_VALUE_OPTIONS = frozenset({"--check-hash-based-pycs"})
_CHECK_SCRIPT = "scripts/check.py"
_PYTEST_PROGRAMS = frozenset({"pytest", "py.test"})

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

_DOC_FILES = frozenset({"README.md", "CONTRIBUTING.md", "AGENTS.md", "CLAUDE.md"})
_SKILL_FILE = "SKILL.md"


def segments(command: str) -> list[list[str]]:
    """The argv of each simple command in `command`, in order.

    Pipelines, lists (`|`, `||`, `&&`, `;`, `&`, newlines) and subshell parentheses separate
    commands; leading `NAME=value` assignments and redirections are dropped; one level of
    `bash -c "..."` / `sh -c "..."` is replaced by the commands inside it.
    """
    return _segments(command, 0)


def is_search(command: str) -> bool:
    """Whether any command in `command` searches or lists the tree (grep, rg, find, ls, git grep...)."""
    for argv in _programs(command):
        name = posixpath.basename(argv[0])
        if name in _SEARCH_PROGRAMS:
            return True
        if name == "git" and _git_subcommand(argv) in _GIT_SEARCH:
            return True
    return False


def runs_check_script(command: str) -> bool:
    """Whether any command in `command` executes scripts/check.py (not cat, grep or echo of it)."""
    for argv in _programs(command):
        if _is_check_script(argv[0]):
            return True
        if _PYTHON.match(posixpath.basename(argv[0])):
            kind, target = _python_target(argv[1:])
            if kind == "script" and target is not None and _is_check_script(target):
                return True
    return False


def runs_pytest(command: str) -> bool:
    """Whether any command in `command` runs pytest (`pytest`, `py.test` or `python -m pytest`)."""
    for argv in _programs(command):
        name = posixpath.basename(argv[0])
        if name in _PYTEST_PROGRAMS:
            return True
        if _PYTHON.match(name) and _python_target(argv[1:]) == ("module", "pytest"):
            return True
    return False


def read_paths(command: str) -> list[str]:
    """Files that `command` prints: arguments of cat, head, tail, less, more, bat, nl and `sed -n`.

    Paths are returned as written, minus a leading `./`, in order (duplicates kept).
    """
    paths: list[str] = []
    for argv in _programs(command):
        name = posixpath.basename(argv[0])
        if name in _READERS:
            paths.extend(_operands(argv[1:], _READER_VALUE_OPTIONS.get(name, frozenset())))
        elif name == "sed":
            paths.extend(_sed_read_paths(argv[1:]))
    return [_normalise(p) for p in paths if p != "-"]


def is_doc(path: str) -> bool:
    """Whether a workspace-relative path is project documentation (root README/AGENTS/... or docs/)."""
    path = _normalise(path)
    return path in _DOC_FILES or path.startswith("docs/")


def is_skill(path: str) -> bool:
    """Whether a path is a skill definition (a file named SKILL.md)."""
    return posixpath.basename(path) == _SKILL_FILE


def _segments(command: str, depth: int) -> list[list[str]]:
    result: list[list[str]] = []
    for argv in _split(command):
        while argv and _ASSIGNMENT.match(argv[0]):
            argv = argv[1:]
        if not argv:
            continue
        inner = _shell_c_command(argv)
        if inner is not None and depth < _MAX_NESTING:
            result.extend(_segments(inner, depth + 1))
        else:
            result.append(argv)
    return result


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
    """The command string of `bash -c "..."` (also `sh -lc`, `bash -ec`), else None."""
    if posixpath.basename(argv[0]) not in _SHELLS:
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


def _programs(command: str) -> list[list[str]]:
    """Each simple command with wrappers like `env`, `time` and `timeout 60` peeled off."""
    result = []
    for argv in segments(command):
        argv = _unwrap(argv)
        if argv:
            result.append(argv)
    return result


def _unwrap(argv: list[str]) -> list[str]:
    # Bounded, so a pathological chain of wrappers cannot loop for long.
    for _ in range(8):
        if not argv:
            return argv
        name = posixpath.basename(argv[0])
        rest = argv[1:]
        if name == "env":
            while rest and (rest[0].startswith("-") or _ASSIGNMENT.match(rest[0])):
                rest = rest[2:] if rest[0] in ("-u", "--unset", "-C", "--chdir") else rest[1:]
        elif name in ("time", "nohup", "command", "exec", "builtin", "stdbuf"):
            while rest and rest[0].startswith("-"):
                rest = rest[1:]
        elif name == "nice":
            while rest and rest[0].startswith("-"):
                rest = rest[2:] if rest[0] in ("-n", "--adjustment") else rest[1:]
        elif name == "timeout":
            while rest and rest[0].startswith("-"):
                rest = rest[2:] if rest[0] in ("-s", "--signal", "-k", "--kill-after") else rest[1:]
            rest = rest[1:]  # the duration
        else:
            return argv
        argv = rest
    return argv


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


def _python_target(args: list[str]) -> tuple[str, str | None]:
    """What a python command line runs: ("script", path), ("module", name), ("code", None) or ("repl", None).

    Short options may be clustered (`-uc`, `-mpytest`, `-Xdev`); `-c`, `-m`, `-X` and `-W` take the
    rest of their cluster or the next argument as their value.
    """
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-" or not arg.startswith("-"):
            return "script", arg
        if arg.startswith("--"):
            i += 2 if arg in _PYTHON_VALUE_OPTIONS else 1
            continue
        consumed_next = False
        for pos, flag in enumerate(arg[1:], start=1):
            if flag not in "cmXW":
                continue
            value = arg[pos + 1 :]
            if not value:
                value = args[i + 1] if i + 1 < len(args) else ""
                consumed_next = True
            if flag == "c":
                return "code", None
            if flag == "m":
                return "module", value or None
            break  # -X/-W: the value is not a flag cluster
        i += 2 if consumed_next else 1
    return "repl", None


def _is_check_script(path: str) -> bool:
    path = _normalise(path)
    return path == _CHECK_SCRIPT or (path.startswith("/") and path.endswith("/" + _CHECK_SCRIPT))


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

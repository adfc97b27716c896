"""What an interpreter's command line runs: a Python script, module or code; node's script and options.

Lexical only, on one program's argv (wrappers already peeled off by rig.session.shell): the runner
kinds use it to recognise their own command in an agent's shell, the shell analysis to find the
script a command runs.
"""

import re

PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)?)?$")
# Long interpreter options that consume the next argument.
_PYTHON_VALUE_OPTIONS = frozenset({"--check-hash-based-pycs"})
NODE = frozenset({"node", "nodejs"})
# Node options that consume the next argument (a module to preload, a condition, a reporter...).
_NODE_VALUE_OPTIONS = frozenset(
    {
        "-r",
        "--require",
        "--import",
        "--loader",
        "--experimental-loader",
        "-C",
        "--conditions",
        "--input-type",
        "--env-file",
        "--title",
        "--test-reporter",
        "--test-reporter-destination",
        "--test-name-pattern",
        "--test-skip-pattern",
        "--test-concurrency",
        "--test-timeout",
        "--inspect-port",
    }
)
# Node options whose value is code to run instead of a script.
_NODE_CODE_OPTIONS = frozenset({"-e", "--eval", "-p", "--print"})


def python_target(args: list[str]) -> tuple[str, str | None]:
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


def node_target(args: list[str]) -> tuple[list[str], str | None]:
    """The options of a node command line before its script, and the script (None: code from -e
    or -p, the REPL, or none)."""
    options: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return options, args[i + 1] if i + 1 < len(args) else None
        if not arg.startswith("-") or arg == "-":
            return options, arg
        options.append(arg)
        if arg in _NODE_CODE_OPTIONS or arg.partition("=")[0] in _NODE_CODE_OPTIONS:
            return options, None
        i += 2 if arg in _NODE_VALUE_OPTIONS else 1
    return options, None

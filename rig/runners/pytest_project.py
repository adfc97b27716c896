"""The project's own pytest configuration, as the hidden tests of a pack with a project environment
run under it: its rootdir, pythonpath, markers, filterwarnings and root conftest.py, but never the
options that choose, stop, repeat or measure tests.

The configuration file is the workspace's, which the rig restored from the pristine fixture before
verification (every file pytest reads its configuration from is protected). Its `addopts` are kept
without the options the rig owns: which tests run (-k, -m, --lf, --deselect), when they stop (-x,
--maxfail), reruns and workers (--reruns, -n), the cache, the junit path, coverage (a project's
threshold must not fail a run of a few tests) and how modules are imported.
"""

import configparser
import shlex
import tomllib
from collections.abc import Callable
from pathlib import Path

from rig.confine.untrusted import read_text

# pytest's own order of configuration files in a directory (pytest 9 reads the TOML ones first).
_FILES = (
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
)
# Options the rig owns, with the number of values each takes when written apart from it.
_DROPPED = {
    "-x": 0,
    "--exitfirst": 0,
    "--maxfail": 1,
    "-k": 1,
    "-m": 1,
    "--lf": 0,
    "--last-failed": 0,
    "--ff": 0,
    "--failed-first": 0,
    "--nf": 0,
    "--new-first": 0,
    "--lfnf": 1,
    "--last-failed-no-failures": 1,
    "--sw": 0,
    "--stepwise": 0,
    "--sw-skip": 0,
    "--stepwise-skip": 0,
    "--cache-clear": 0,
    "--deselect": 1,
    "--pdb": 0,
    "--trace": 0,
    "-n": 1,
    "--numprocesses": 1,
    "--dist": 1,
    "--maxprocesses": 1,
    "--looponfail": 0,
    "-f": 0,
    "--reruns": 1,
    "--reruns-delay": 1,
    "--only-rerun": 1,
    "--junitxml": 1,
    "--junit-xml": 1,
    "--junit-prefix": 1,
    "--basetemp": 1,
    "--import-mode": 1,
    "-c": 1,
    "--config-file": 1,
    "--rootdir": 1,
    "--confcutdir": 1,
    "-p": 1,
    "--no-cov": 0,
    "--cov-fail-under": 1,
    "--cov-report": 1,
    "--cov-config": 1,
    "--cov-context": 1,
    "--cov-branch": 0,
    "--cov-append": 0,
}
# Short options whose value may follow without a space (-k expr, -kexpr).
_ATTACHED = ("-k", "-m", "-n", "-p", "-c")
# Plugins that choose, repeat, reorder or measure tests: never loaded for the hidden tests.
NEVER_LOADED = frozenset(
    {"pytest_cov", "pytest_cov.plugin", "xdist", "xdist.plugin", "xdist.looponfail", "pytest_rerunfailures"}
    | {"pytest_randomly", "pytest_random_order.plugin", "pytest_repeat", "pytest_flakefinder"}
)


def chosen(read: Callable[[str], str | None]) -> str | None:
    """The name of the file pytest takes its configuration from, as pytest chooses it, given
    `read`, a file's text by name (None when absent); None if none."""
    for name in _FILES:
        text = read(name)
        if text is None:
            continue
        if name == "pyproject.toml":
            tool = _toml(text).get("tool", {})
            if isinstance(tool, dict) and ("pytest" in tool):
                return name
        elif name == "tox.ini":
            if _ini(text, "pytest") is not None:
                return name
        elif name == "setup.cfg":
            if _ini(text, "tool:pytest") is not None:
                return name
        else:
            return name
    return None


def config_file(root: Path) -> Path | None:
    """The file pytest takes its configuration from in `root`, as pytest chooses it; None if none."""
    name = chosen(lambda name: read_text(root / name))
    return root / name if name else None


def option(path: Path, key: str) -> list[str] | None:
    """An option of the configuration file at `path` (`addopts`, `python_files`), split into
    arguments; None if it does not set it."""
    return option_in(path.name, read_text(path) or "", key)


def option_in(name: str, text: str, key: str) -> list[str] | None:
    """An option of the configuration file `name` whose text is `text`, as option() gives it."""
    if name.endswith(".toml"):
        data = _toml(text)
        table = (
            data.get("tool", {}).get("pytest", {}) if name == "pyproject.toml" else data.get("pytest", data)
        )
        if isinstance(table, dict) and isinstance(table.get("ini_options"), dict):
            table = table["ini_options"]
        value = table.get(key) if isinstance(table, dict) else None
    else:
        value = (_ini(text, "tool:pytest" if name == "setup.cfg" else "pytest") or {}).get(key)
    if value is None:
        return None
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def kept_addopts(args: list[str]) -> list[str]:
    """`args` without the options the rig owns (and their values)."""
    kept: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, joined, _ = arg.partition("=")
        i += 1
        if name in _DROPPED:
            i += 0 if joined else _DROPPED[name]
        elif name.startswith("--cov"):
            # --cov's value is optional: `--cov src` is one option, `--cov -q` two.
            if not joined and i < len(args) and not args[i].startswith("-"):
                i += 1
        elif not (arg[:2] in _ATTACHED and len(arg) > 2):
            kept.append(arg)
    return kept


def _toml(text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}


def _ini(text: str, section: str) -> dict[str, str] | None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return dict(parser[section]) if parser.has_section(section) else None

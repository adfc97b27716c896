"""`rig harness install`: the pinned harness CLIs, installed with npm into the rig's cache, once.

The tests run in a loopback-only network namespace: npm installs the pinned Pi from its own cache,
which `make setup` (npm ci in harnesses/node) filled with every tarball of the lock. The checkout's
own copy under harnesses/node is hidden where a test must see the cache's.
"""

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import harnesses.cli
from harnesses.cli import installs_on_first_use
from harnesses.protocol import CliNotFound
from harnesses.registry import cli_names, make_adapter
from harnesses.versions import MARKER, PINNED_LOCK
from rig.cli import app

PACKAGE = "@mariozechner/pi-coding-agent"
LOCK = json.loads(PINNED_LOCK.read_text())["packages"]
PINNED = LOCK[f"node_modules/{PACKAGE}"]["version"]
FOLDER_NAME = f"{PACKAGE.replace('/', '+')}@{PINNED}"


def _rig(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Result]]:
    """The rig's cache after one `rig harness install pi`, and what that printed; the module's
    tests run with $RIG_HARNESS_CACHE pointing at it."""
    cache = tmp_path_factory.mktemp("harness-cache")
    # What an install killed with SIGKILL leaves: its build folder, which the next install removes.
    (cache / f".{FOLDER_NAME}.killed" / "node_modules").mkdir(parents=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIG_HARNESS_CACHE", str(cache))
        yield cache, _rig("harness", "install", "pi")


@pytest.fixture
def no_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """As where rig is installed without a checkout: no pinned copies under harnesses/node."""
    monkeypatch.setattr(harnesses.cli, "NODE_BIN", tmp_path / "no-checkout")


def test_install_puts_the_pinned_version_in_the_cache_once(installed):
    cache, first = installed
    folder = cache / FOLDER_NAME

    assert first.exit_code == 0, first.output
    assert first.stderr.splitlines() == [
        f"installing {PACKAGE}@{PINNED} from the npm registry into {folder} (once)"
    ]
    assert first.stdout.startswith(f"pi {PINNED}: installed: {folder}/node_modules/.bin/pi; runs use the ")
    assert json.loads((folder / MARKER).read_text())["version"] == PINNED
    # Exactly the lock's versions, the CLI's whole tree, as `make setup` installs in the checkout.
    tree = json.loads((folder / "package-lock.json").read_text())["packages"]
    assert tree[f"node_modules/{PACKAGE}"]["version"] == PINNED
    assert {k: v["version"] for k, v in tree.items() if k} == {k: LOCK[k]["version"] for k in tree if k}
    assert sorted(p.name for p in cache.iterdir()) == [FOLDER_NAME, f"{FOLDER_NAME}.lock"]

    marker = (folder / MARKER).read_text()
    again = _rig("harness", "install", "pi")
    assert again.exit_code == 0, again.output
    assert again.stderr == ""
    assert again.stdout.startswith(
        f"pi {PINNED}: already installed, nothing to do: {folder}/node_modules/.bin/pi"
    )
    assert (folder / MARKER).read_text() == marker


def test_a_run_without_a_checkout_uses_the_cache_and_list_says_so(installed, no_checkout, task):
    cache, _ = installed
    cli = cache / FOLDER_NAME / "node_modules" / ".bin" / "pi"

    listed = _rig("harness", "list", "--json")
    assert listed.exit_code == 0, listed.output
    row = json.loads(listed.stdout)["pi"]
    assert (row["cli_where"], row["cli"]) == ("cache", str(cli))
    table = _rig("harness", "list")
    assert [line.split("│")[3].strip() for line in table.stdout.splitlines() if "│ pi " in line] == ["cache"]

    adapter = make_adapter("pi", task)
    assert adapter.cli() == cli
    assert adapter.version() == PINNED


def test_a_missing_cli_is_not_installed_on_first_use_in_tests(tmp_path, monkeypatch, no_checkout, task):
    monkeypatch.setenv("RIG_HARNESS_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert os.environ["RIG_INSTALL_HARNESSES"] == "0"  # tests/conftest.py

    with pytest.raises(CliNotFound) as caught:
        make_adapter("pi", task).cli()
    assert str(caught.value) == (
        "pi is not installed: run `rig harness install pi` (`make setup` in a checkout), "
        "or set $RIG_PI_BIN to a copy"
    )
    listed = json.loads(_rig("harness", "list", "--json").stdout)["pi"]
    assert (listed["cli_where"], listed["cli"]) == ("missing", None)
    assert not (tmp_path / "empty-cache").exists()


class _Stdin:
    def __init__(self, terminal: bool) -> None:
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.mark.parametrize(
    ("value", "terminal", "ci", "installs"),
    [
        ("1", False, "true", True),
        ("0", True, "", False),
        ("", True, "", True),
        ("", False, "", False),
        ("", True, "true", False),
        ("", True, "false", True),
    ],
)
def test_the_first_use_rule(monkeypatch, value, terminal, ci, installs):
    monkeypatch.setenv("RIG_INSTALL_HARNESSES", value)
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(sys, "stdin", _Stdin(terminal))
    assert installs_on_first_use() is installs


def test_a_first_use_setting_that_is_neither_1_nor_0_is_refused(monkeypatch):
    monkeypatch.setenv("RIG_INSTALL_HARNESSES", "yes")
    with pytest.raises(CliNotFound, match=r"^\$RIG_INSTALL_HARNESSES is 'yes'; set it to 1 .* or unset it$"):
        installs_on_first_use()


def test_without_node_or_npm_one_line_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("RIG_HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))

    result = _rig("harness", "install", "pi")

    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: node and npm are not on PATH, so no harness CLI can be installed; install Node.js 20 "
        "or later with npm (https://nodejs.org, or your system's nodejs and npm packages), then rerun"
    ]
    assert not (tmp_path / "cache").exists()


def test_an_npm_failure_is_one_line_and_leaves_the_complete_install(installed, tmp_path, monkeypatch):
    cache, _ = installed
    marker = (cache / FOLDER_NAME / MARKER).read_text()
    # npm with an empty cache of its own and no registry: --force must reinstall, and cannot.
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "npm-cache"))
    monkeypatch.setenv("npm_config_offline", "true")

    result = _rig("harness", "install", "pi", "--force")

    assert result.exit_code == 1, result.output
    error = result.stderr.splitlines()[-1]
    assert error.startswith(f"error: npm install {PACKAGE}@{PINNED} failed (")
    assert error.endswith(
        "check that the version exists (`npm view "
        + PACKAGE
        + " versions`) and that the registry is reachable"
    )
    # Nothing half-written: the install it was to replace is whole, and no build folder is left.
    assert (cache / FOLDER_NAME / MARKER).read_text() == marker
    assert sorted(p.name for p in cache.iterdir()) == [FOLDER_NAME, f"{FOLDER_NAME}.lock"]


@pytest.mark.parametrize("name", ["nonesuch", "scripted"])
def test_a_name_without_a_cli_is_one_line_naming_the_known_ones(tmp_path, monkeypatch, name):
    monkeypatch.setenv("RIG_HARNESS_CACHE", str(tmp_path / "cache"))

    result = _rig("harness", "install", name)

    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: no harness CLI named {name!r}; give one of {', '.join(cli_names())}, or all"
    ]
    assert cli_names() == ("pi", "claude-code", "codex", "gemini", "opencode")
    assert not (tmp_path / "cache").exists()

"""The mocha runner kind (rig/runners/mocha.py) on a real small JavaScript project
(tests/data/mocha_pack: mocha 11, its .mocharc.json naming a spec that the hidden tests' folder is
not in), in its npm environment built offline from npm's cache (`make setup-dev`): the hidden
tests run under the project's configuration without its spec, from mocha's JSON report, its exit
code (the number of failures) cross-checked; node:assert is frozen before the code under test
loads; `rig pack new` recognises it."""

import os
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest
from env_pack import RIG

from rig.env.activate import activate
from rig.packs.manifest import load_pack
from rig.paths import REPO_ROOT
from rig.runners.mocha import MOCHA
from rig.schema import HiddenOutcome
from rig.verify.checks import derive, run_hidden
from rig.workspace.build import copy_fixture

PACK = REPO_ROOT / "tests" / "data" / "mocha_pack"
TASK = "t1_clamp_above"


def offline(cache: Path) -> dict[str, str]:
    return {**os.environ, "RIG_ENV_DIR": str(cache), "npm_config_offline": "true"}


@pytest.fixture
def offline_npm(monkeypatch: pytest.MonkeyPatch) -> None:
    """npm installs from its cache alone (the tests' network is loopback)."""
    monkeypatch.setenv("npm_config_offline", "true")


def test_calibration_runs_the_hidden_tests_under_the_projects_config(tmp_path: Path) -> None:
    done = subprocess.run(
        [RIG, "calibrate", "--pack", str(PACK)],
        capture_output=True,
        text=True,
        timeout=600,
        env=offline(tmp_path),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6/6 passed, all PASS" in done.stdout, done.stdout
    assert (
        f"[PASS] {TASK} decoy high_only: fails as expected: 1 hidden (holds a value below at low)"
        in done.stdout
    )


def hidden_run(
    tmp_path: Path, source: str | None = None, hidden: dict[str, str] | None = None
) -> HiddenOutcome:
    """The task's hidden tests (with `hidden` files added) on the fixture, whose src/clamp.js is
    replaced by `source`; the environment is built into the tests' shared cache."""
    pack = load_pack(PACK)
    env = activate(pack)
    work = copy_fixture(pack.fixture_dir, tmp_path / "work")
    if source is not None:
        (work / "src" / "clamp.js").write_text(source)
    assert derive(work, tmp_path / "home", env) is None
    tests = tmp_path / "hidden"
    shutil.copytree(PACK / "hidden_tests" / TASK, tests)
    for name, text in (hidden or {}).items():
        (tests / name).write_text(text)
    return run_hidden(
        work, tests, tmp_path / "report.json", tmp_path / "home", pack.spec.runner, project_env=env
    )


def test_ids_exit_code_and_a_file_that_fails_to_load(tmp_path: Path, offline_npm: None) -> None:
    outcome = hidden_run(tmp_path, hidden={"other_hidden.test.js": 'require("./no-such-module");\n'})
    assert outcome.passed == [
        "clamp_hidden::holds a value above at high",
        "clamp_hidden::holds a value below at low",
    ]
    # Three failures (two canaries and the file that did not load): mocha exited 3, as its report says.
    assert outcome.failed == ["other_hidden::other_hidden"] and outcome.exit_code == 1, outcome
    assert outcome.error is None or "canary" not in outcome.error, outcome.error


ASSERT_DISARMED = """// Code under test that disarms node:assert once it is required.
const assert = require("node:assert");
assert.equal = () => {};
assert.strict.equal = () => {};

function clamp(value) {
  return value;
}

module.exports = { clamp };
"""


def test_node_assert_cannot_be_disarmed_from_the_code_under_test(tmp_path: Path, offline_npm: None) -> None:
    outcome = hidden_run(tmp_path, ASSERT_DISARMED)
    assert not outcome.ok and "clamp_hidden::holds a value above at high" in outcome.failed, outcome
    assert "<canary>" not in outcome.failed, outcome


def test_the_kind_recognises_its_command_and_files() -> None:
    assert MOCHA.runs_tests(["mocha"]) and MOCHA.runs_tests(["mocha", "test/a.test.js"])
    assert MOCHA.runs_tests(["node", "node_modules/mocha/bin/mocha.js"])
    assert not MOCHA.runs_tests(["mocha", "init"]) and not MOCHA.runs_tests(["node", "--test"])
    assert MOCHA.collects(PurePosixPath("test/clamp.js")) and not MOCHA.collects(
        PurePosixPath("src/clamp.js")
    )
    assert not MOCHA.collects(PurePosixPath("test/deep/clamp.js"))


def test_pack_new_recognises_a_mocha_project_and_passes_its_gate(tmp_path: Path) -> None:
    repo = tmp_path / "clamp"
    shutil.copytree(PACK / "fixture", repo)
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i"],
    ):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    env = {**offline(tmp_path / "envs"), "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    done = subprocess.run(
        [RIG, "pack", "new", str(tmp_path / "pack"), "--from", str(repo)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    spec = load_pack(tmp_path / "pack").spec
    assert spec.runner.kind == "mocha" and "runner: mocha (package.json devDependencies mocha)" in done.stdout
    assert ".mocharc.json" in spec.protect.files
    assert "gate on the clean fixture, in the environment: passes (npm test)" in done.stdout, done.stdout

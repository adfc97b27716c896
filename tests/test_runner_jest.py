"""The jest runner kind (rig/runners/jest.py) on a real small JavaScript project
(tests/data/jest_pack: jest 30, its package.json config with a testMatch that the hidden tests'
folder does not match, coverage on with a 100% threshold), in its npm environment built offline
from npm's cache (`make setup-dev`): the hidden tests run under the project's config with the
rig's selection, from jest's JSON results; a test's id is `<stem>::<test>`; matchers replaced from
the code under test fail the canaries; `rig pack new` recognises it."""

import os
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest
from env_pack import RIG

from rig.env.activate import activate
from rig.packs.manifest import load_pack
from rig.paths import REPO_ROOT
from rig.runners.jest import JEST
from rig.schema import HiddenOutcome
from rig.verify.checks import derive, run_hidden
from rig.workspace.build import copy_fixture

PACK = REPO_ROOT / "tests" / "data" / "jest_pack"
TASK = "t1_empty_text"


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
        f"[PASS] {TASK} decoy empty_string_only: fails as expected: 1 hidden (punctuation only" in done.stdout
    )


def hidden_run(
    tmp_path: Path, source: str | None = None, hidden: dict[str, str] | None = None
) -> HiddenOutcome:
    """The task's hidden tests (with `hidden` files added) on the fixture, whose src/count.js is
    replaced by `source`; the environment is built into the tests' shared cache."""
    pack = load_pack(PACK)
    env = activate(pack)
    work = copy_fixture(pack.fixture_dir, tmp_path / "work")
    if source is not None:
        (work / "src" / "count.js").write_text(source)
    assert derive(work, tmp_path / "home", env) is None
    tests = tmp_path / "hidden"
    shutil.copytree(PACK / "hidden_tests" / TASK, tests)
    for name, text in (hidden or {}).items():
        (tests / name).write_text(text)
    return run_hidden(
        work, tests, tmp_path / "report.json", tmp_path / "home", pack.spec.runner, project_env=env
    )


def test_ids_and_a_file_that_fails_to_load_is_its_stem(tmp_path: Path, offline_npm: None) -> None:
    outcome = hidden_run(tmp_path, hidden={"other_hidden.test.js": 'require("./no-such-module");\n'})
    assert outcome.passed == [
        "count_hidden::empty text has no words",
        "count_hidden::punctuation only has no words",
    ]
    assert outcome.failed == ["other_hidden::other_hidden"] and "<canary>" not in outcome.failed, outcome
    assert (tmp_path / "report.json").is_file()


FORCED = """// Code under test that makes every toBe pass once it is required.
expect.extend({ toBe: () => ({ pass: true, message: () => "" }) });

function countWords(text) {
  return text.split(" ").length;
}

module.exports = { countWords };
"""


def test_matchers_replaced_from_the_code_under_test_fail_the_canaries(
    tmp_path: Path, offline_npm: None
) -> None:
    outcome = hidden_run(tmp_path, FORCED)
    assert not outcome.ok and outcome.failed[0] == "<canary>", outcome
    assert "passed instead of failing" in (outcome.error or ""), outcome.error


def test_the_kind_recognises_its_command_and_files() -> None:
    assert JEST.runs_tests(["jest"]) and JEST.runs_tests(["jest", "--ci", "src"])
    assert JEST.runs_tests(["node", "node_modules/jest/bin/jest.js"])
    assert not JEST.runs_tests(["jest", "--init"]) and not JEST.runs_tests(["node", "--test"])
    assert JEST.collects(PurePosixPath("src/__tests__/count.js")) and JEST.collects(
        PurePosixPath("a.spec.ts")
    )
    assert not JEST.collects(PurePosixPath("node_modules/x/a.test.js")) and not JEST.collects(
        PurePosixPath("a.js")
    )


def test_pack_new_recognises_a_jest_project_and_passes_its_gate(tmp_path: Path) -> None:
    repo = tmp_path / "wordcount"
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
    assert spec.runner.kind == "jest" and "runner: jest (package.json devDependencies jest)" in done.stdout
    assert spec.environment is not None and spec.environment.manager == "npm"
    assert "gate on the clean fixture, in the environment: passes (npm test)" in done.stdout, done.stdout

"""The jest runner kind (rig/runners/jest.py) on a real small JavaScript project
(tests/data/jest_pack: jest 30, its package.json config with a testMatch that the hidden tests'
folder does not match, coverage on with a 100% threshold), in its npm environment built offline
from npm's cache (`make setup-dev`): the hidden tests run under the project's config with the
rig's selection, from jest's JSON results; a test's id is `<stem>::<test>`; matchers replaced from
the code under test fail the canaries; `rig pack new` recognises it."""

from pathlib import Path, PurePosixPath

from node_packs import DATA, hidden_run, offline, pack_new_from, rig

from rig.packs.manifest import load_pack
from rig.runners.jest import JEST
from rig.schema import HiddenOutcome

PACK = DATA / "jest_pack"
TASK = "t1_empty_text"


def test_calibration_runs_the_hidden_tests_under_the_projects_config(tmp_path: Path) -> None:
    done = rig(offline(tmp_path), "calibrate", "--pack", str(PACK))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7/7 passed, all PASS" in done.stdout, done.stdout
    assert (
        f"[PASS] {TASK} decoy empty_string_only: fails as expected: 1 hidden (punctuation only" in done.stdout
    )


def solved(tmp_path: Path, source: str | None = None, hidden: dict[str, str] | None = None) -> HiddenOutcome:
    """The hidden tests (and `hidden` files) on the fixture, src/count.js replaced by `source`."""
    return hidden_run(PACK, TASK, tmp_path, {"src/count.js": source} if source is not None else None, hidden)


def test_ids_and_a_file_that_fails_to_load_is_its_stem(tmp_path: Path, offline_npm: None) -> None:
    outcome = solved(tmp_path, hidden={"other_hidden.test.js": 'require("./no-such-module");\n'})
    assert outcome.passed == [
        "count_hidden::empty text has no words",
        "count_hidden::punctuation only has no words",
    ]
    assert outcome.failed == ["other_hidden::other_hidden"] and "<canary>" not in outcome.failed, outcome
    assert (tmp_path / "report").is_file()


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
    outcome = solved(tmp_path, FORCED)
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
    done = pack_new_from(PACK / "fixture", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    spec = load_pack(tmp_path / "pack").spec
    assert spec.runner.kind == "jest" and "runner: jest (package.json devDependencies jest)" in done.stdout
    assert spec.environment is not None and spec.environment.manager == "npm"
    assert "gate on the clean fixture, in the environment: passes (npm test)" in done.stdout, done.stdout

"""The mocha runner kind (rig/runners/mocha.py) on a real small JavaScript project
(tests/data/mocha_pack: mocha 11, its .mocharc.json naming a spec that the hidden tests' folder is
not in), in its npm environment built offline from npm's cache (`make setup-dev`): the hidden
tests run under the project's configuration without its spec, from mocha's JSON report, its exit
code (the number of failures) cross-checked; node:assert is frozen before the code under test
loads; `rig pack new` recognises it."""

from pathlib import Path, PurePosixPath

from node_packs import DATA, hidden_run, offline, pack_new_from, rig

from rig.packs.manifest import load_pack
from rig.runners.js import is_module
from rig.runners.mocha import MOCHA
from rig.schema import HiddenOutcome

PACK = DATA / "mocha_pack"
TASK = "t1_clamp_above"


def test_calibration_runs_the_hidden_tests_under_the_projects_config(tmp_path: Path) -> None:
    done = rig(offline(tmp_path), "calibrate", "--pack", str(PACK))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7/7 passed, all PASS" in done.stdout, done.stdout
    assert (
        f"[PASS] {TASK} decoy high_only: fails as expected: 1 hidden (holds a value below at low)"
        in done.stdout
    )


def solved(tmp_path: Path, source: str | None = None, hidden: dict[str, str] | None = None) -> HiddenOutcome:
    """The hidden tests (and `hidden` files) on the fixture, src/clamp.js replaced by `source`."""
    return hidden_run(PACK, TASK, tmp_path, {"src/clamp.js": source} if source is not None else None, hidden)


def test_ids_exit_code_and_a_file_that_fails_to_load(tmp_path: Path, offline_npm: None) -> None:
    outcome = solved(tmp_path, hidden={"other_hidden.test.js": 'require("./no-such-module");\n'})
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
    outcome = solved(tmp_path, ASSERT_DISARMED)
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
    done = pack_new_from(PACK / "fixture", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    spec = load_pack(tmp_path / "pack").spec
    assert spec.runner.kind == "mocha" and "runner: mocha (package.json devDependencies mocha)" in done.stdout
    assert ".mocharc.json" in spec.protect.files
    assert "gate on the clean fixture, in the environment: passes (npm test)" in done.stdout, done.stdout


ESM_HIDDEN = """import assert from "node:assert/strict";
import clampModule from "../src/clamp.js";

describe("esm_hidden", () => {
  it("holds a value above at high", () => {
    assert.equal(clampModule.clamp(11, 0, 10), 10);
  });
});
"""


def test_an_es_module_hidden_file_runs_between_its_canaries(tmp_path: Path, offline_npm: None) -> None:
    # An ES module cannot be required from a CommonJS wrapper on every node: it is imported.
    hidden = {"esm_hidden.test.mjs": ESM_HIDDEN, "broken_hidden.test.mjs": 'import "./no-such-module.mjs";\n'}
    outcome = solved(tmp_path, hidden=hidden)
    assert "esm_hidden::holds a value above at high" in outcome.passed, outcome
    assert outcome.failed == ["broken_hidden::broken_hidden"], outcome
    assert outcome.error is None or "canary" not in outcome.error, outcome.error


def test_a_files_module_type_is_its_suffix_or_its_nearest_package_json(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text('{"type": "module"}')
    (tmp_path / "legacy" / "deep").mkdir(parents=True)
    (tmp_path / "legacy" / "package.json").write_text('{"type": "commonjs"}')
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "package.json").symlink_to(tmp_path / "legacy" / "package.json")
    assert is_module(tmp_path / "a.test.js", tmp_path) and is_module(tmp_path / "legacy" / "b.mjs", tmp_path)
    assert not is_module(tmp_path / "legacy" / "deep" / "c.test.js", tmp_path)
    assert not is_module(tmp_path / "d.test.cjs", tmp_path)
    # A link is read as no package.json: the search goes on to the tree's own.
    assert is_module(tmp_path / "linked" / "e.test.js", tmp_path)

"""The vitest runner kind (rig/runners/vitest.py) on a real small TypeScript project
(tests/data/vitest_pack: vitest 4, its config with an `include` that the hidden tests' folder does
not match and a 100% coverage threshold), in its npm environment built offline from npm's cache
(`make setup-dev`): the hidden tests run under the project's config with the rig's selection, a
test's id is `<stem>::<test>`, forced outcomes fail the canaries, and `rig pack new` recognises it."""

import json
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest
from node_packs import DATA, added, hidden_run, offline, pack_new_from, rig, run_env, scripted_run

from rig.packs.manifest import load_pack
from rig.runners.vitest import VITEST
from rig.schema import HiddenOutcome

PACK = DATA / "vitest_pack"
TASK = "t1_trim_dashes"


def calibrate(pack: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return rig(offline(cache), "calibrate", "--pack", str(pack))


def test_calibration_runs_the_hidden_tests_under_the_projects_config(tmp_path: Path) -> None:
    # The project's include (test/**) matches no hidden file: the rig's config names the wrappers.
    done = calibrate(PACK, tmp_path / "envs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7/7 passed, all PASS" in done.stdout, done.stdout
    assert (
        f"[PASS] {TASK} decoy trim_the_end_only: fails as expected: 1 hidden (no dash at either end)"
        in done.stdout
    )


def test_a_coverage_threshold_and_a_missing_provider_cannot_fail_the_hidden_run(tmp_path: Path) -> None:
    # Coverage on in the project's config, with a provider that is not installed and a 100%
    # threshold: the hidden run turns coverage off, so neither can fail it.
    pack = tmp_path / "pack"
    shutil.copytree(PACK, pack)
    config = pack / "fixture" / "vitest.config.ts"
    config.write_text(config.read_text().replace("coverage: {", 'coverage: { enabled: true, provider: "v8",'))
    manifest = (pack / "pack.toml").read_text()
    (pack / "pack.toml").write_text(
        manifest.replace('"--typecheck"]', '"--typecheck", "--coverage.enabled=false"]')
    )
    done = calibrate(pack, tmp_path / "envs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7/7 passed, all PASS" in done.stdout, done.stdout


# The agent runs the project's type tests: vitest's typecheck writes tsc's state into vitest's own
# package, which the environment turns into a write into the agent's tree.
TYPECHECK = 'npx vitest run --typecheck.only > typecheck.txt 2>&1; echo "exit $?" >> typecheck.txt'


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_an_agents_typecheck_writes_into_its_tree_not_the_environment(sandbox: str, tmp_path: Path) -> None:
    records, diff = scripted_run(run_env(tmp_path), PACK, tmp_path, [TYPECHECK], sandbox)
    probe = records["probe"]
    ran = added(diff, "typecheck.txt")
    # Under the sandbox the environment is read-only: without the link, tsc's write fails there.
    assert ran[-1] == "exit 0" and any("Type Errors" in line and "no errors" in line for line in ran), ran
    assert not [a for a in probe["audit"] if a["rule"] == "toolchain_changed"], probe["audit"]
    assert probe["files_changed"] == ["A typecheck.txt"], probe["files_changed"]
    assert records["solution"]["success"] is True


def solved(tmp_path: Path, source: str | None = None, hidden: dict[str, str] | None = None) -> HiddenOutcome:
    """The hidden tests (and `hidden` files) on the fixture, src/slug.ts replaced by `source`."""
    return hidden_run(PACK, TASK, tmp_path, {"src/slug.ts": source} if source is not None else None, hidden)


def test_ids_are_stem_and_test_and_a_file_that_fails_to_load_is_its_stem(
    tmp_path: Path, offline_npm: None
) -> None:
    broken = "\n".join(
        [
            'import { missing } from "../src/slug";',
            'import { test } from "vitest";',
            'test("x", () => missing());',
            "",
        ]
    )
    outcome = solved(tmp_path, hidden={"other_hidden.test.ts": broken})
    assert outcome.passed == ["slug_hidden::no dash at either end", "slug_hidden::punctuation only is empty"]
    assert outcome.failed == ["other_hidden::x"] and not outcome.ok, outcome
    syntax = solved(tmp_path / "syntax", hidden={"other_hidden.test.ts": "this is not ( valid"})
    assert syntax.failed == ["other_hidden::other_hidden"] and "<canary>" not in syntax.failed, syntax


FORCED = """import { beforeEach, onTestFinished } from "vitest";

// Code under test that forces every outcome to pass once its module is imported.
beforeEach((ctx) => {
  onTestFinished(() => {
    if (ctx.task.result) {
      ctx.task.result.state = "pass";
      ctx.task.result.errors = [];
    }
  });
});

export function slugify(text: string): string {
  return text;
}
"""


def test_outcomes_forced_from_the_code_under_test_fail_the_canaries(
    tmp_path: Path, offline_npm: None
) -> None:
    outcome = solved(tmp_path, FORCED)
    assert not outcome.ok and outcome.failed[0] == "<canary>", outcome
    assert "passed instead of failing" in (outcome.error or ""), outcome.error


def test_the_kind_recognises_its_command_and_files() -> None:
    assert VITEST.runs_tests(["vitest"]) and VITEST.runs_tests(["vitest", "run", "src"])
    assert VITEST.runs_tests(["node", "node_modules/vitest/vitest.mjs", "run"])
    assert not VITEST.runs_tests(["vitest", "init"]) and not VITEST.runs_tests(["node", "--test"])
    assert VITEST.collects(PurePosixPath("src/a.spec.tsx")) and VITEST.collects(PurePosixPath("t/b.test.mjs"))
    assert not VITEST.collects(PurePosixPath("node_modules/x/a.test.js"))
    assert not VITEST.collects(PurePosixPath("src/test.ts"))
    assert VITEST.is_test_file("slug.test.ts") and not VITEST.is_test_file("slug.ts")


def test_pack_new_recognises_a_vitest_project_and_passes_its_gate(tmp_path: Path) -> None:
    done = pack_new_from(PACK / "fixture", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    spec = load_pack(tmp_path / "pack").spec
    assert (
        spec.runner.kind == "vitest" and "runner: vitest (package.json devDependencies vitest)" in done.stdout
    )
    assert spec.environment is not None and spec.environment.manager == "npm"
    assert spec.gate.command == ["npm", "test"] and "vitest.config.ts" in spec.protect.files
    assert "gate on the clean fixture, in the environment: passes" in done.stdout, done.stdout
    example = json.dumps(
        (tmp_path / "pack" / "hidden_tests" / "example" / "example_hidden.test.ts").read_text()
    )
    assert "vitest" in example

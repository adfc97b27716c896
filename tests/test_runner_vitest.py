"""The vitest runner kind (rig/runners/vitest.py) on a real small TypeScript project
(tests/data/vitest_pack: vitest 4, its config with an `include` that the hidden tests' folder does
not match and a 100% coverage threshold), in its npm environment built offline from npm's cache
(`make setup-dev`): the hidden tests run under the project's config with the rig's selection, a
test's id is `<stem>::<test>`, forced outcomes fail the canaries, and `rig pack new` recognises it."""

import json
import os
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest
from env_pack import RIG

from rig.env.activate import activate
from rig.packs.manifest import load_pack
from rig.paths import REPO_ROOT
from rig.runners.vitest import VITEST
from rig.schema import HiddenOutcome
from rig.verify.checks import derive, run_hidden
from rig.workspace.build import copy_fixture

PACK = REPO_ROOT / "tests" / "data" / "vitest_pack"
TASK = "t1_trim_dashes"


def offline(cache: Path) -> dict[str, str]:
    return {**os.environ, "RIG_ENV_DIR": str(cache), "npm_config_offline": "true"}


def calibrate(pack: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RIG, "calibrate", "--pack", str(pack)],
        capture_output=True,
        text=True,
        timeout=600,
        env=offline(cache),
    )


def test_calibration_runs_the_hidden_tests_under_the_projects_config(tmp_path: Path) -> None:
    # The project's include (test/**) matches no hidden file: the rig's config names the wrappers.
    done = calibrate(PACK, tmp_path / "envs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6/6 passed, all PASS" in done.stdout, done.stdout
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
        manifest.replace('run = ["vitest", "run"]', 'run = ["vitest", "run", "--coverage.enabled=false"]')
    )
    done = calibrate(pack, tmp_path / "envs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6/6 passed, all PASS" in done.stdout, done.stdout


def hidden_run(
    tmp_path: Path, source: str | None = None, hidden: dict[str, str] | None = None
) -> HiddenOutcome:
    """The task's hidden tests (with `hidden` files added) on the fixture, whose src/slug.ts is
    replaced by `source`; the environment is built into the tests' shared cache."""
    pack = load_pack(PACK)
    env = activate(pack)
    work = copy_fixture(pack.fixture_dir, tmp_path / "work")
    if source is not None:
        (work / "src" / "slug.ts").write_text(source)
    assert derive(work, tmp_path / "home", env) is None
    tests = tmp_path / "hidden"
    shutil.copytree(PACK / "hidden_tests" / TASK, tests)
    for name, text in (hidden or {}).items():
        (tests / name).write_text(text)
    return run_hidden(
        work, tests, tmp_path / "junit.xml", tmp_path / "home", pack.spec.runner, project_env=env
    )


@pytest.fixture
def offline_npm(monkeypatch: pytest.MonkeyPatch) -> None:
    """npm installs from its cache alone (the tests' network is loopback)."""
    monkeypatch.setenv("npm_config_offline", "true")


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
    outcome = hidden_run(tmp_path, hidden={"other_hidden.test.ts": broken})
    assert outcome.passed == ["slug_hidden::no dash at either end", "slug_hidden::punctuation only is empty"]
    assert outcome.failed == ["other_hidden::x"] and not outcome.ok, outcome
    syntax = hidden_run(tmp_path / "syntax", hidden={"other_hidden.test.ts": "this is not ( valid"})
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
    outcome = hidden_run(tmp_path, FORCED)
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
    repo = tmp_path / "slugproject"
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

"""The notes-js pack, a JavaScript project, is proved by `rig calibrate --pack` like the built-in one.

The clean fixture passes its gate (`node scripts/check.mjs --json`, which `npm run check` runs);
each task's baseline fails exactly the gate stages and hidden tests its task.toml declares; each
reference solution passes the gate and every hidden test; each decoy fails exactly where declared;
the pack is byte-identical afterwards. Hidden test ids are `<suite>::<test>`: each hidden file
wraps its tests in one top-level describe() named after the file's stem.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rig.confine.proc import scrubbed_env
from rig.packs.manifest import load_pack
from rig.packs.tasks import load_tasks
from rig.paths import REPO_ROOT

PACK = REPO_ROOT / "packs" / "notes-js"
RIG = str(Path(sys.executable).with_name("rig"))
TIMEOUT_S = 300


def test_pack_layout() -> None:
    """Every hidden test file is named `<stem>.test.mjs` and declares the ids task.toml expects under
    its stem; the migration task ships its skill."""
    for task in load_tasks(load_pack(PACK)):
        stems = {p.name.removesuffix(".test.mjs") for p in task.hidden_dir.glob("*.test.mjs")}
        assert stems, f"{task.id} has no hidden tests"
        for expectation in (task.spec.baseline, *task.spec.decoys.values()):
            assert {test.split("::", 1)[0] for test in expectation.fails_hidden} <= stems
    skill = (PACK / "tasks" / "t5_migration" / "skill" / "SKILL.md").read_text(encoding="utf-8")
    assert skill.startswith("---\nname: ") and "\ndescription: " in skill.split("\n---\n", 1)[0]


@pytest.mark.slow
def test_rig_calibrate_proves_the_pack() -> None:
    done = subprocess.run(
        [RIG, "calibrate", "--pack", str(PACK), "--json", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    report = json.loads(done.stdout)
    failing = [f"{i['name']}: {i['reason']}" for i in report["items"] if not i["passed"]]
    assert done.returncode == 0 and report["ok"], failing
    kinds = [item["kind"] for item in report["items"]]
    assert kinds.count("baseline") == kinds.count("solution") == 5 and kinds.count("decoy") == 15
    assert report["items"][-1]["name"] == "pack unchanged"


@pytest.mark.slow
def test_npm_run_check_is_the_gate(tmp_path: Path) -> None:
    """`npm run check -- --json`, the command the pack's docs tell agents to run, runs the same gate."""
    work = shutil.copytree(PACK / "fixture", tmp_path / "work")
    env = scrubbed_env(tmp_path / "home", {"npm_config_update_notifier": "false", "npm_config_fund": "false"})
    proc = subprocess.run(
        ["npm", "run", "--silent", "check", "--", "--json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["ok"] is True

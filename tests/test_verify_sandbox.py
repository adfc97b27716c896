"""Verification runs the agent's code (the gate imports it, the hidden tests call it), so it runs in
the agent's sandbox: that code cannot write the rig's files or the shared bytecode prefix, and no
process it starts outlives the command. Real bubblewrap, real gates, both packs.

Before, an agent sandboxed on its own turn made the gate's process overwrite the rig's hidden tests
(found through the rig's working directory) and print an ok report: the unfixed task was scored a
success (tests/redteam_strategies.py R54, R55).
"""

import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
from redteam_strategies import JS_IMPORTS, NOTES_JS, PAGINATION_JS, TARGETS, TASK

from rig.confine.sandbox import Sandbox, resolve
from rig.packs.manifest import load_pack
from rig.packs.tasks import load_tasks
from rig.paths import REPO_ROOT
from rig.schema import Task
from rig.verify.checks import run_check, run_hidden, warm_bytecode
from rig.workspace.build import apply_patch, copy_fixture

MARKER = "97.4242"
# Tries, from every process that imports it, to write two files it names and to leave a process.
REACH_JS = """import {{ spawn }} from "node:child_process";
import {{ writeFileSync }} from "node:fs";

for (const target of {targets}) {{
  try {{
    writeFileSync(target, "written by the agent's code");
  }} catch {{
    // refused
  }}
}}
spawn("sleep", ["{marker}"], {{ detached: true, stdio: "ignore" }}).unref();
"""
REACH_PY = """import subprocess

_targets = {targets}
for _target in _targets:
    try:
        with open(_target, "w") as _handle:
            _handle.write("written by the agent's code")
    except OSError:
        pass
subprocess.Popen(
    ["sleep", "{marker}"],
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
    start_new_session=True,
)
"""
INIT = "taskapp/__init__.py"
INIT_IMPORT = "from taskapp.app import Client, Response\n"


def _sandbox(hidden: list[Path]) -> Sandbox:
    """The agent's sandbox as rig.run.runner.make_context builds it: the rig's folders hidden."""
    node = Path(shutil.which("node") or "/usr/bin/node").resolve()
    exposed = [Path(sys.prefix), Path(sys.base_prefix), node.parent.parent]
    plan, status = resolve("require", [REPO_ROOT, Path.home(), *hidden], exposed)
    assert plan is not None and status.active, "bubblewrap is needed: `make setup` installs it"
    return plan


def _sleepers() -> list[int]:
    """Live processes the payload started (zombies aside: killed, not yet reaped)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or MARKER not in (entry / "cmdline").read_bytes().decode(
                errors="replace"
            ):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


@pytest.fixture
def no_sleepers():
    """Kills what the payload left (it must leave nothing under the sandbox: asserted by the tests)."""
    yield
    for pid in _sleepers():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _workspace(tmp_path: Path, pack_folder: str) -> tuple[Task, Path]:
    task = load_tasks(load_pack(pack_folder or None), [TASK])[0]
    workdir = copy_fixture(task.pack.fixture_dir, tmp_path / "work")
    apply_patch(workdir, task.setup_patch)
    return task, workdir


def _plant(workdir: Path, rel: str, anchor: str, new: str) -> None:
    path = workdir / rel
    text = path.read_text()
    assert anchor in text
    path.write_text(text.replace(anchor, new, 1))


@pytest.mark.parametrize("pack", [NOTES_JS, "taskapp"])
def test_the_gate_cannot_write_the_rigs_files_or_leave_a_process(tmp_path, pack, no_sleepers):
    """The same payload, in the code the gate imports: without the sandbox it writes both files and
    leaves its process (so the test can tell); inside, nothing, and the gate still judges."""
    rig_files, prefix = tmp_path / "rig", tmp_path / "pycache"
    rig_files.mkdir()
    prefix.mkdir()
    victim, planted = rig_files / "hidden_test.txt", prefix / "planted.pyc"
    targets = json.dumps([str(victim), str(planted)], indent=4)
    task, workdir = _workspace(tmp_path, TARGETS[pack].folder)
    if pack == NOTES_JS:
        _plant(
            workdir, PAGINATION_JS, JS_IMPORTS, JS_IMPORTS + REACH_JS.format(targets=targets, marker=MARKER)
        )
    else:
        code = REACH_PY.format(targets=targets, marker=MARKER)
        _plant(workdir, INIT, INIT_IMPORT, f"{code}\n{INIT_IMPORT.rstrip()}  # noqa: E402\n")
    gate = task.pack.spec.gate
    sandbox = _sandbox([rig_files, prefix, tmp_path / "results"])

    check = run_check(workdir, tmp_path / "home-in", gate, 300, prefix, sandbox)
    assert check.failed == list(TARGETS[pack].stages), check
    assert not victim.exists() and not planted.exists()
    assert _sleepers() == [], "a process the gate's code started outlived the sandbox"

    run_check(workdir, tmp_path / "home-out", gate, 300, prefix)
    assert victim.exists() and planted.exists() and _sleepers(), "the payload did nothing unsandboxed"


def test_the_hidden_report_comes_out_of_the_sandbox(tmp_path):
    """The runner writes its junit inside; the rig copies it to the attempt folder, hidden there."""
    task, workdir = _workspace(tmp_path, TARGETS[NOTES_JS].folder)
    junit = tmp_path / "results" / "attempt" / "hidden-junit.xml"
    junit.parent.mkdir(parents=True)
    sandbox = _sandbox([tmp_path / "results"])
    outcome = run_hidden(
        workdir, task.hidden_dir, junit, tmp_path / "home", task.pack.spec.runner, 300, None, sandbox
    )
    assert outcome.failed == list(TARGETS[NOTES_JS].hidden)
    assert "exact_multiple_last_page" in junit.read_text()


@pytest.mark.slow
def test_python_verification_reads_the_shared_prefix_and_never_writes_it(tmp_path):
    """The trusted warm-up fills the prefix (pytest's bytecode); sandboxed verification leaves it as
    it was and still judges the unfixed task."""
    task, workdir = _workspace(tmp_path, "")
    prefix = tmp_path / "pycache"
    warm_bytecode(task.pack, prefix)
    files = {p: p.stat().st_mtime_ns for p in prefix.rglob("*") if p.is_file()}
    assert any("_pytest" in p.parts for p in files), "the warm-up compiled no pytest"
    sandbox = _sandbox([prefix])
    check = run_check(workdir, tmp_path / "home", task.pack.spec.gate, 300, prefix, sandbox)
    hidden = run_hidden(
        workdir,
        task.hidden_dir,
        tmp_path / "j.xml",
        tmp_path / "home",
        task.pack.spec.runner,
        300,
        prefix,
        sandbox,
    )
    assert check.failed == list(TARGETS["taskapp"].stages)
    assert hidden.failed == list(TARGETS["taskapp"].hidden)
    assert {p: p.stat().st_mtime_ns for p in prefix.rglob("*") if p.is_file()} == files

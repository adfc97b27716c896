"""Nothing left behind: a verification copy whose runner was killed is removed by the next `rig run`
of any experiment and by `rig status --repair`, and a copy a live runner holds never is.

Every copy is claimed by its runner (rig.run.leftovers): the kernel drops the claim when the runner
dies however it died. Runners of other experiments sweep the one copy root while this one makes
copies in it, so a claim is never seen before it is held.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_faults import rig, rig_env, start_runner, stray_processes, write_experiment

from rig.confine.untrusted import remove_trees
from rig.run.leftovers import CLAIM_FILE, claim, release, remove_stale_copies, stale_copies
from rig.workspace import scratch
from rig.workspace.scratch import VERIFY_ROOM_VAR, VERIFY_ROOT_VAR, choose_scratch, copy_root, default_root

TASK = "t1_fix_pagination"
# check.py's pytest imports taskapp in the rig's copy of the workspace, and sleeps there: the
# runner holds that copy for as long as the test needs it.
HANG_IN_VERIFICATION = "printf 'import time\\ntime.sleep(3600)\\n' >> taskapp/__init__.py"


def stuck(tmp_path: Path, name: str) -> Path:
    """An experiment whose one run hangs in verification, on its copy."""
    return write_experiment(
        tmp_path,
        name,
        [{"name": "hang", "harness_options": {"policy": "script", "commands": [HANG_IN_VERIFICATION]}}],
        tasks=[TASK],
        timeouts={"agent_s": 60, "stall_s": 30, "check_s": 3600, "hidden_s": 3600},
    )


def copy_folder(tmp_path: Path, name: str) -> Path:
    """The folder experiment `name` of `rig_env(tmp_path)` makes its copies in (this process's
    environment choosing the copy root as the runners' does)."""
    return choose_scratch(tmp_path / "runs" / name, tmp_path / "results" / name, workers=1).folder


def verifying_copy(folder: Path, runner: subprocess.Popen[bytes]) -> Path:
    """The claimed copy in `folder` that verification runs in, once it does."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and runner.poll() is None:
        for copy in folder.glob("verify-*"):
            if (copy / CLAIM_FILE).is_file() and stray_processes(copy):
                return copy
        time.sleep(0.1)
    raise AssertionError(f"no verification started in a copy in {folder} (runner exit {runner.poll()})")


def stop(runners: list[subprocess.Popen[bytes]], *roots: Path) -> None:
    """Kill the runners this test started, and what they started under `roots` that outlived them
    (a runner killed with -9 leaves its verification's processes to the next runner's reaper)."""
    for runner in runners:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
    for root in roots:
        for line in stray_processes(root):
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize(
    ("where", "sweep", "ran_before"),
    [
        ("own root", ["run"], False),
        ("own root", ["status", "--repair"], True),
        # An experiment that never ran has no results to repair: the copies go all the same.
        ("own root", ["status", "--repair"], False),
        # The default root in memory is shared by every test running beside this one.
        pytest.param("memory", ["run"], False, marks=pytest.mark.serial),
    ],
    ids=["own-root-run", "own-root-status-repair", "own-root-status-repair-never-run", "memory-run"],
)
def test_a_killed_runners_copy_goes_with_the_next_runner_of_another_experiment_a_live_ones_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, sweep: list[str], ran_before: bool
) -> None:
    env = rig_env(tmp_path)
    for var in (VERIFY_ROOT_VAR, VERIFY_ROOM_VAR):
        env.pop(var, None)
        monkeypatch.delenv(var, raising=False)
    if where == "own root":
        env[VERIFY_ROOT_VAR] = str(tmp_path / "copies")
        monkeypatch.setenv(VERIFY_ROOT_VAR, env[VERIFY_ROOT_VAR])
    root = tmp_path / "copies" if where == "own root" else default_root()
    other = write_experiment(
        tmp_path, "other", [{"name": "nothing", "harness_options": {"policy": "nothing"}}], tasks=[TASK]
    )
    if ran_before:
        first = rig(tmp_path, "run", str(other), env=env)
        assert first.returncode == 0, first.stderr[-3000:]
    killed_folder, live_folder = copy_folder(tmp_path, "killed"), copy_folder(tmp_path, "live")
    assert killed_folder.parent == live_folder.parent == root
    killed = start_runner(stuck(tmp_path, "killed"), env)
    live = start_runner(stuck(tmp_path, "live"), env)
    try:
        dead_copy = verifying_copy(killed_folder, killed)
        live_copy = verifying_copy(live_folder, live)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
        # What the kill left: a copy claimed by a runner that is gone, which its own experiment
        # alone would have removed, on its resume.
        assert (dead_copy / CLAIM_FILE).is_file()
        assert dead_copy in stale_copies(root) and live_copy not in stale_copies(root)

        proc = rig(tmp_path, *sweep, str(other), env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        said = proc.stdout + proc.stderr
        assert f"verification copies left by stopped runners were removed from {root}" in said, said
        assert not dead_copy.exists() and not killed_folder.exists()
        # The live runner's copy is untouched, and its verification still runs in it.
        assert live.poll() is None and (live_copy / CLAIM_FILE).is_file()
        assert stray_processes(live_copy)
    finally:
        stop([killed, live], tmp_path, killed_folder, live_folder)
        remove_trees([killed_folder, live_folder])


def test_only_copies_whose_claim_is_free_are_removed_and_no_link_is_followed(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    one, two = root / "one-0a1b", root / "two-2c3d"
    live, dead, kept, unclaimed, not_a_copy = (
        one / name for name in ("verify-live", "verify-dead", "verify-kept", "verify-unclaimed", "work-dead")
    )
    only = two / "verify-dead"
    outside, linked_lock = elsewhere / "verify-outside", one / "verify-linked-lock"
    for tree in (live, dead, kept, unclaimed, not_a_copy, only, outside, linked_lock):
        tree.mkdir(parents=True)
    held = claim(live)
    # Claimed by a process that has exited since: the kernel dropped its lock.
    code = "import sys; from pathlib import Path; from rig.run.leftovers import claim\n"
    code += "for tree in sys.argv[1:]: claim(Path(tree))"
    subprocess.run(
        [sys.executable, "-c", code, str(dead), str(not_a_copy), str(only), str(outside)], check=True
    )
    release(kept, claim(kept), kept=True)
    # Links to copies whose claim is free, as an experiment's folder and as a copy, and a claim file
    # that is a link to a free one: none is the rig's own copy.
    (root / "three-4e5f").symlink_to(elsewhere)
    (one / "verify-link").symlink_to(outside)
    (linked_lock / CLAIM_FILE).symlink_to(outside / CLAIM_FILE)

    assert stale_copies(root) == [dead, only]
    assert remove_stale_copies(root) == ([dead, only], [])
    # The folder the last copy of an experiment left is removed with it; the others stay as they were.
    assert sorted(p.name for p in root.iterdir()) == ["one-0a1b", "three-4e5f"]
    left = [
        "verify-kept",
        "verify-link",
        "verify-linked-lock",
        "verify-live",
        "verify-unclaimed",
        "work-dead",
    ]
    assert sorted(p.name for p in one.iterdir()) == left
    assert (outside / CLAIM_FILE).is_file()
    assert remove_stale_copies(None) == ([], [])
    release(live, held, kept=False)
    assert stale_copies(root) == [live]


# Makes copies in an experiment's folder of the root, claims each, and checks it is still there,
# for `seconds`: what a runner does while runners of other experiments sweep the same root.
MAKER = """
import json, sys, tempfile, time
from pathlib import Path
from rig.confine.untrusted import remove_trees
from rig.run.leftovers import claim, release

folder, seconds = Path(sys.argv[1]), float(sys.argv[2])
made = refused = lost = 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    folder.mkdir(exist_ok=True)
    try:
        tree = Path(tempfile.mkdtemp(prefix="verify-", dir=folder))
    except FileNotFoundError:
        continue  # swept away, empty, just now: the runner makes it again (rig.run.steps.collect)
    try:
        fd = claim(tree)
    except OSError:
        refused += 1
        continue
    made += 1
    lost += not tree.is_dir()
    remove_trees([tree])
    release(tree, fd, kept=False)
print(json.dumps({"made": made, "refused": refused, "lost": lost}))
"""
SWEEPER = """
import sys, time
from pathlib import Path
from rig.run.leftovers import remove_stale_copies

root, seconds = Path(sys.argv[1]), float(sys.argv[2])
end = time.monotonic() + seconds
while time.monotonic() < end:
    remove_stale_copies(root)
"""


def test_sweeping_the_copy_root_never_takes_a_copy_being_claimed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    seconds = "3"
    procs = [
        subprocess.Popen([sys.executable, "-c", MAKER, str(root / name), seconds], stdout=subprocess.PIPE)
        for name in ("a-0a1b", "b-2c3d")
    ]
    procs += [subprocess.Popen([sys.executable, "-c", SWEEPER, str(root), seconds]) for _ in range(2)]
    try:
        outputs = [proc.communicate(timeout=60)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0, 0, 0, 0]
    for made in (json.loads(out) for out in outputs[:2]):
        # A claim file seen before it is locked would be taken for stale (lost), or its lock held
        # by the sweep when the runner takes it (refused).
        assert made["made"] > 100 and made["refused"] == 0 and made["lost"] == 0, made


def test_the_copy_root_is_the_chosen_one_or_this_users_own_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = tmp_path / "chosen"
    monkeypatch.setenv(VERIFY_ROOT_VAR, str(chosen))
    assert copy_root() is None
    chosen.mkdir()
    assert copy_root() == chosen.resolve()

    monkeypatch.delenv(VERIFY_ROOT_VAR)
    monkeypatch.setattr(scratch, "SHM", tmp_path / "shm")
    (tmp_path / "shm").mkdir()
    assert default_root() == tmp_path / "shm" / f"rig-{os.getuid()}" and copy_root() is None
    # A name in the shared /dev/shm someone else made: a link, or another user's directory.
    default_root().symlink_to(chosen)
    assert copy_root() is None
    default_root().unlink()
    default_root().mkdir()
    assert copy_root() == default_root()
    os.chown(default_root(), os.getuid() + 1, -1)
    assert copy_root() is None

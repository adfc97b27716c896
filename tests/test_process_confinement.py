"""Process containment without bubblewrap, through real processes: cgroup leaves, PID namespaces.

An agent that starts a process with `setsid env -i ...` leaves both its process group and its
token behind; whatever backend holds it (a cgroup v2 leaf, a PID namespace of its own), nothing it
started may be alive when `run_agent_process` returns, nor after an interrupted or killed runner.
The machine these tests run on has cgroup v2, unshare and bubblewrap (`make setup`); RIG_CGROUP=off
and RIG_PIDNS=off force the weaker backends.
"""

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from harnesses.cli import NODE_BIN
from harnesses.scripted.adapter import AGENT_SCRIPT
from rig.confine.agent import Confinement, kill_running_agents, run_agent_process
from rig.confine.proc import (
    JOIN_CGROUP,
    SH,
    _empty_leaf,  # the path of kernels without cgroup.kill, which this one has
    create_leaf,
    leaf_members,
    own_cgroup,
    reap_orphans,
    runner_tag,
)
from rig.confine.sandbox import resolve
from rig.paths import REPO_ROOT
from rig.run.doctor import diagnose
from rig.schema import AgentRun, SandboxStatus

REPO_BIN = str(Path(sys.executable).parent)
# A loop that rewrites a workspace file, then the marker as its $0 (in its command line only).
LOOP = 'while :; do echo x >> "$PWD/tick"; sleep 0.05; done'
# The agent waits until its escaped process runs, then exits 0 at once: the rig must find it.
WAIT_UP = "while [ ! -s tick ]; do sleep 0.02; done"
ESCAPES = {
    "setsid_env_i": f"setsid env -i /bin/sh -c '{LOOP}' {{marker}} & disown; {WAIT_UP}; exit 0",
    "double_fork": f"( ( setsid env -i /bin/sh -c '{LOOP}' {{marker}} & ) & ); {WAIT_UP}; exit 0",
    "ignores_sigterm": (
        f"setsid env -i /bin/sh -c \"trap '' TERM INT HUP; {LOOP}\" {{marker}} & disown; {WAIT_UP}; exit 0"
    ),
}


def _marker() -> str:
    return f"rigpc-{secrets.token_hex(6)}"


def _alive(marker: str) -> list[int]:
    """Pids of live processes whose command line contains `marker` (zombies have none)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                pids.append(int(entry.name))
    return pids


def _leaves(runner: int) -> list[Path]:
    """The cgroup leaves of the runner `runner` that are still there."""
    tag = runner_tag(runner)
    base = own_cgroup()
    assert tag is not None and base is not None, "cgroup v2 is needed for these tests"
    return sorted(base.glob(f"rig-{tag}-*"))


@pytest.fixture
def marker():
    """A marker for the test's processes; any still alive at the end are killed (a failed test)."""
    mark = _marker()
    yield mark
    for pid in _alive(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(params=["cgroup", "pidns"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The backend the machine allows (cgroup), or the fallback forced by RIG_CGROUP=off (pidns)."""
    if request.param == "pidns":
        monkeypatch.setenv("RIG_CGROUP", "off")
    return request.param


def _unconfined(mode: str, monkeypatch: pytest.MonkeyPatch) -> SandboxStatus:
    """The status of a run without bubblewrap: forced missing (auto) or `--sandbox off`."""
    if mode == "auto":
        monkeypatch.setenv("RIG_BWRAP", "/nonexistent/bwrap")
    plan, status = resolve(mode, [], [])
    assert plan is None and not status.active
    return status


def _run(tmp_path: Path, script: str, confinement: Confinement, timeout: float = 60) -> AgentRun:
    workdir, run_dir = tmp_path / "work", tmp_path / "results" / "attempt-1"
    workdir.mkdir(exist_ok=True)
    (run_dir / "home").mkdir(parents=True, exist_ok=True)
    env = {"PATH": f"{REPO_BIN}:/usr/bin:/bin", "HOME": str(run_dir / "home"), "LANG": "C.UTF-8"}
    return run_agent_process(["bash", "-c", script], workdir, env, run_dir, timeout, 30, None, confinement)


def _assert_nothing_writes(tick: Path) -> None:
    """The escaped loop wrote `tick`, and nothing writes it any more."""
    size = tick.stat().st_size
    assert size > 0, "the escaped process never ran"
    time.sleep(0.3)
    assert tick.stat().st_size == size, "a process of the agent still writes into the workspace"


@pytest.mark.parametrize("escape", sorted(ESCAPES))
@pytest.mark.parametrize("mode", ["auto", "off"], ids=["bwrap-missing", "sandbox-off"])
def test_escaped_processes_die_with_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, mode: str, escape: str, marker: str
) -> None:
    status = _unconfined(mode, monkeypatch)
    assert status.processes == backend, status.processes_detail
    assert status.warning() is not None and status.warning().endswith(f"contained by {backend}")
    run = _run(tmp_path, ESCAPES[escape].format(marker=marker), Confinement(sandbox=None))
    assert _alive(marker) == [], "a process the agent started outlived run_agent_process"
    assert run.exit_code == 0 and not run.timed_out
    assert run.processes == backend
    assert _leaves(os.getpid()) == []
    if backend == "cgroup":
        # Found in the leaf, though it carries no token and left the session.
        assert run.leftover_processes >= 1
    _assert_nothing_writes(tmp_path / "work" / "tick")


def test_at_the_timeout_the_agent_and_its_escaped_processes_die(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, marker: str
) -> None:
    """The agent itself ignores SIGTERM and never exits; the namespace dies before the runner sees it go."""
    _unconfined("off", monkeypatch)
    script = f"trap '' TERM; setsid env -i /bin/sh -c '{LOOP}' {marker} & while :; do sleep 0.1; done"
    start = time.monotonic()
    run = _run(tmp_path, script, Confinement(), timeout=2)
    assert _alive(marker) == []
    assert run.timed_out and run.exit_code is None and run.processes == backend
    assert time.monotonic() - start < 15
    assert _leaves(os.getpid()) == []
    _assert_nothing_writes(tmp_path / "work" / "tick")


def test_under_bubblewrap_the_agent_is_also_in_a_cgroup_leaf(tmp_path: Path, marker: str) -> None:
    exposed = [Path(sys.prefix), Path(sys.base_prefix), NODE_BIN.parent, AGENT_SCRIPT]
    plan, status = resolve("require", [REPO_ROOT, tmp_path / "results", Path.home()], exposed)
    assert plan is not None and status.processes == "bwrap-pidns"
    assert "a cgroup v2 leaf per agent" in (status.processes_detail or "")
    script = f"cat /proc/self/cgroup; {ESCAPES['setsid_env_i'].format(marker=marker)}"
    run = _run(tmp_path, script, Confinement(sandbox=plan))
    assert f"0::/rig-{runner_tag(os.getpid())}-" in run.stdout_path.read_text()
    assert run.sandboxed and run.processes == "bwrap-pidns"
    assert _alive(marker) == [] and _leaves(os.getpid()) == []


def test_the_token_reaper_is_the_last_resort_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str
) -> None:
    monkeypatch.setenv("RIG_CGROUP", "off")
    monkeypatch.setenv("RIG_PIDNS", "off")
    status = _unconfined("auto", monkeypatch)
    assert status.processes == "token-reaper"
    assert "a process that clears its environment (env -i) escapes it" in (status.processes_detail or "")
    # It still finds a process that left the session but kept its environment.
    run = _run(tmp_path, f"setsid /bin/sh -c '{LOOP}' {marker} & {WAIT_UP}", Confinement())
    assert run.processes == "token-reaper" and run.leftover_processes >= 1
    assert _alive(marker) == []
    cleanup = next(p for p in diagnose() if p.name == "process cleanup")
    assert not cleanup.active and cleanup.detail.startswith("token-reaper: ")


def test_interrupted_runner_kills_the_cgroup_or_namespace_of_its_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, marker: str
) -> None:
    """kill_running_agents (Ctrl-C, SIGTERM) while an agent and its escaped process run."""
    _unconfined("off", monkeypatch)
    script = f"setsid env -i /bin/sh -c '{LOOP}' {marker} & sleep 300"
    runs: list[AgentRun] = []
    worker = threading.Thread(target=lambda: runs.append(_run(tmp_path, script, Confinement())))
    worker.start()
    deadline = time.monotonic() + 30
    while not (tmp_path / "work" / "tick").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(marker), "the escaped process never started"
    assert kill_running_agents() == 1
    worker.join(timeout=30)
    assert not worker.is_alive() and runs[0].processes == backend
    assert _alive(marker) == [] and _leaves(os.getpid()) == []
    _assert_nothing_writes(tmp_path / "work" / "tick")


RUNNER = """
import sys
from pathlib import Path

from rig.confine.agent import Confinement, run_agent_process

work, run_dir, script = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
work.mkdir()
env = {"PATH": "/usr/bin:/bin"}
run_agent_process(["bash", "-c", script], work, env, run_dir, 600, 600, None, Confinement())
"""


# Serial: any `rig run` in another worker reaps the orphaned leaf between the kill and the look.
@pytest.mark.serial
def test_the_leaf_of_a_runner_killed_with_9_is_reaped_by_the_next(tmp_path: Path, marker: str) -> None:
    """kill -9 of the runner: setpriv kills the agent, its escaped process lives on in the leaf."""
    script = f"setsid env -i /bin/sh -c '{LOOP}' {marker} & sleep 300"
    env = {**os.environ, "RIG_BWRAP": "/nonexistent/bwrap"}
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(tmp_path / "work"), str(tmp_path / "run"), script],
        cwd=REPO_ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "work" / "tick").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        leaves = _leaves(runner.pid)
        assert len(leaves) == 1 and len(leaf_members(leaves[0])) >= 2, "the agent is not in its leaf"
        reap_orphans()
        assert leaves[0].exists() and _alive(marker), "the leaf of a live runner was reaped"
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    time.sleep(0.3)
    assert _alive(marker), "the escaped process should have outlived its runner"
    assert reap_orphans() >= 1
    assert _alive(marker) == []
    assert not leaves[0].exists()
    _assert_nothing_writes(tmp_path / "work" / "tick")


def test_leaves_of_runners_in_another_pid_namespace_are_left_alone() -> None:
    """Their pids mean nothing here: a live runner there could look dead from here."""
    base = own_cgroup()
    assert base is not None
    foreign = base / f"rig-1-4194304-1-{secrets.token_hex(16)}"
    foreign.mkdir()
    try:
        reap_orphans()
        assert foreign.is_dir()
    finally:
        foreign.rmdir()


def test_without_cgroup_kill_the_leaf_is_frozen_and_each_process_killed(tmp_path: Path, marker: str) -> None:
    """Kernels before 5.14 have no cgroup.kill: a forking process inside still dies, the leaf goes."""
    base = own_cgroup()
    assert base is not None
    leaf = create_leaf(base, secrets.token_hex(16))
    forker = f"while :; do sleep 1 & sleep 0.01; done # {marker}"
    escape = f"setsid env -i /bin/sh -c '{LOOP}' {marker} & {forker}"
    tick = tmp_path / "tick"
    proc = subprocess.Popen(
        [SH, "-c", JOIN_CGROUP, "rig-cgroup", str(leaf / "cgroup.procs"), "bash", "-c", escape],
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not tick.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _empty_leaf(leaf, 10, use_kill_file=False) >= 3
        proc.wait(timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its own session (start_new_session)
        proc.wait()
    assert _alive(marker) == [] and not leaf.exists()
    _assert_nothing_writes(tick)


def test_doctor_names_the_process_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, "RIG_RUNS_ROOT": str(tmp_path / "runs"), "RIG_BWRAP": "/nonexistent/bwrap"}
    doctor = subprocess.run(
        [f"{REPO_BIN}/rig", "doctor", "--json"], env=env, capture_output=True, text=True, timeout=300
    )
    cleanup = next(p for p in json.loads(doctor.stdout) if p["name"] == "process cleanup")
    assert cleanup["active"] and cleanup["detail"].startswith("cgroup: a cgroup v2 leaf per agent")
    table = subprocess.run(
        [f"{REPO_BIN}/rig", "doctor"], env=env, capture_output=True, text=True, timeout=300
    ).stdout
    assert "process cleanup" in table and "cgroup: a cgroup v2 leaf" in table
    cleanup_here = next(p for p in diagnose() if p.name == "process cleanup")
    assert cleanup_here.detail.startswith("bwrap-pidns: bubblewrap's PID namespace; a cgroup v2 leaf")
    monkeypatch.setenv("RIG_BWRAP", "/nonexistent/bwrap")
    monkeypatch.setenv("RIG_CGROUP", "off")
    cleanup_here = next(p for p in diagnose() if p.name == "process cleanup")
    assert cleanup_here.active and cleanup_here.detail.startswith("pidns: no cgroup (RIG_CGROUP=off)")


AS_USER = """
import sys
from pathlib import Path

from rig.confine.agent import Confinement, run_agent_process
from rig.confine.sandbox import resolve

root, script = Path(sys.argv[1]), sys.argv[2]
(root / "work").mkdir()
_plan, status = resolve("off", [], [])
run = run_agent_process(["bash", "-c", script], root / "work", {"PATH": "/usr/bin:/bin"}, root / "run", 60)
print(status.model_dump_json())
print(run.model_dump_json())
"""


def test_an_ordinary_user_gets_a_pid_namespace_keeping_its_uid(marker: str) -> None:
    """Not root: no cgroup of its own here, so a PID namespace in a user namespace, same uid inside."""
    # pytest's tmp_path lies below folders only root may enter.
    with tempfile.TemporaryDirectory(prefix="rig-as-user-") as folder:
        Path(folder).chmod(0o777)
        _run_as_nobody(Path(folder), marker)


def _run_as_nobody(root: Path, marker: str) -> None:
    script = f"id -u; setsid env -i /bin/sh -c '{LOOP}' {marker} & {WAIT_UP}"
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", AS_USER]
        + [str(root), script],
        cwd=REPO_ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    status_json, run_json = proc.stdout.splitlines()[-2:]
    status, run = SandboxStatus.model_validate_json(status_json), AgentRun.model_validate_json(run_json)
    assert status.processes == "pidns" and run.processes == "pidns"
    assert "no cgroup: cannot create a cgroup in" in (status.processes_detail or "")
    assert "--user --map-current-user" in (status.processes_detail or "")
    assert run.stdout_path.read_text().split()[:1] == ["65534"]
    assert _alive(marker) == []
    _assert_nothing_writes(root / "work" / "tick")

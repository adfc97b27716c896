"""The agent's confinement, through real processes: bubblewrap, the reaper, file and stream bounds.

Each test runs a real command under `run_agent_process`, the one function every adapter uses, so
what holds here holds for every harness.
"""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builtin_pack import FIXTURE_DIR, HIDDEN_TESTS_DIR, TASKS_DIR

from harnesses.cli import NODE_BIN
from harnesses.scripted.adapter import AGENT_SCRIPT
from rig.confine.agent import Confinement, run_agent_process
from rig.confine.proc import process_identity, reap_orphans
from rig.confine.sandbox import Sandbox, SandboxError, find_bwrap, resolve
from rig.paths import REPO_ROOT
from tests.processes import background_job, interrupt

REPO_BIN = str(Path(sys.executable).parent)


def _sandbox(tmp_path: Path) -> Sandbox:
    hidden = [REPO_ROOT, tmp_path / "results", Path.home()]
    exposed = [Path(sys.prefix), Path(sys.base_prefix), NODE_BIN.parent, AGENT_SCRIPT]
    plan, status = resolve("require", hidden, exposed)
    assert plan is not None and status.active, "bubblewrap is needed: `make setup` installs it"
    return plan


def _run(tmp_path: Path, script: str, confinement: Confinement, timeout: float = 60):
    workdir, run_dir = tmp_path / "work", tmp_path / "results" / "attempt-1"
    workdir.mkdir(exist_ok=True)
    (run_dir / "home").mkdir(parents=True, exist_ok=True)
    env = {"PATH": f"{REPO_BIN}:/usr/bin:/bin", "HOME": str(run_dir / "home"), "LANG": "C.UTF-8"}
    run = run_agent_process(["bash", "-c", script], workdir, env, run_dir, timeout, 30, None, confinement)
    return run, run.stdout_path.read_text(), run.stderr_path.read_text()


def _alive(marker: str) -> list[int]:
    """Pids of processes whose command line contains `marker`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline and int(entry.name) != os.getpid():
                pids.append(int(entry.name))
    return pids


def test_sandbox_hides_the_rigs_files_and_keeps_the_filesystem_read_only(tmp_path: Path) -> None:
    solution = TASKS_DIR / "t1_fix_pagination" / "solution.patch"
    script = f"""
    ls {shlex.quote(str(TASKS_DIR))} | wc -l
    cat {solution} >/dev/null 2>&1 && echo SOLUTION_READ
    ls {HIDDEN_TESTS_DIR} | wc -l
    ls {FIXTURE_DIR} | wc -l
    touch {FIXTURE_DIR}/pwned 2>/dev/null && echo FIXTURE_WRITTEN
    touch /usr/pwned 2>/dev/null && echo ROOT_WRITTEN
    echo ok > in-workdir && echo WORKDIR_WRITTEN
    echo ok > $HOME/../own-note && echo RUNDIR_WRITTEN
    echo forged > $HOME/../stdout.log 2>/dev/null && echo STREAM_FORGED
    python -c 'import pytest, sys; print("PYTHON_OK", sys.prefix)'
    """
    run, out, _err = _run(tmp_path, script, Confinement(sandbox=_sandbox(tmp_path)))
    lines = out.split()
    assert run.sandboxed and run.exit_code == 0
    assert lines[:1] == ["0"], "the tasks folder must look empty inside the sandbox"
    assert "SOLUTION_READ" not in out and "FIXTURE_WRITTEN" not in out and "ROOT_WRITTEN" not in out
    assert "STREAM_FORGED" not in out
    assert {"WORKDIR_WRITTEN", "RUNDIR_WRITTEN", "PYTHON_OK"} <= set(lines)
    assert not (FIXTURE_DIR / "pwned").exists()
    assert (tmp_path / "work" / "in-workdir").read_text() == "ok\n"


def test_sandbox_gives_the_agent_its_own_process_namespace(tmp_path: Path) -> None:
    runner = os.getpid()
    script = f"kill -0 {runner} 2>/dev/null && echo RUNNER_VISIBLE; ls /proc | grep -c '^[0-9]'"
    run, out, _ = _run(tmp_path, script, Confinement(sandbox=_sandbox(tmp_path)))
    assert "RUNNER_VISIBLE" not in out
    assert int(out.split()[-1]) < 10, "only the agent's own few processes are visible"


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandbox", "no-sandbox"])
def test_processes_left_behind_are_killed_when_the_agent_exits(tmp_path: Path, sandboxed: bool) -> None:
    marker = f"98{os.getpid() % 1000:03d}{int(sandboxed)}"
    # Two escapes from the process group: a new session, and a double fork under nohup.
    script = (
        f"setsid sleep {marker}1 >/dev/null 2>&1 < /dev/null & "
        f"( nohup sleep {marker}2 >/dev/null 2>&1 & ) ; echo started"
    )
    confinement = Confinement(sandbox=_sandbox(tmp_path) if sandboxed else None)
    run, out, _ = _run(tmp_path, script, confinement)
    assert out.strip() == "started"
    time.sleep(0.2)
    assert _alive(f"sleep {marker}") == []
    if not sandboxed:
        # Without a sandbox it is the reaper that found them, by the token they inherited.
        assert run.leftover_processes == 2


def test_a_process_ignoring_sigterm_and_its_children_die_at_the_timeout(tmp_path: Path) -> None:
    marker = f"97{os.getpid() % 1000:03d}"
    script = (
        f"trap '' TERM; sleep {marker} & setsid sleep {marker} & while true; do echo tick; sleep 0.1; done"
    )
    start = time.monotonic()
    run, out, _ = _run(tmp_path, script, Confinement(), timeout=2)
    assert run.timed_out and run.exit_code is None
    assert time.monotonic() - start < 15
    time.sleep(0.2)
    assert _alive(f"sleep {marker}") == []


def test_file_size_limit_stops_an_agent_filling_the_disk(tmp_path: Path) -> None:
    script = "head -c 50000000 /dev/zero > big.bin; echo exit=$?; stat -c %s big.bin"
    run, out, _ = _run(tmp_path, script, Confinement(file_bytes=1_000_000))
    assert (tmp_path / "work" / "big.bin").stat().st_size == 1_000_000
    assert "exit=153" in out, "head is killed by SIGXFSZ (128 + 25) at the limit"


def test_links_out_of_the_attempt_folder_are_removed_before_the_rig_writes(tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"
    target.write_text("precious\n")
    script = f"ln -s {target} $HOME/../check.json; ln -s $HOME/../stdout.log $HOME/../inner-link; echo done"
    run, _out, _ = _run(tmp_path, script, Confinement())
    run_dir = tmp_path / "results" / "attempt-1"
    assert run.removed_links == ["check.json"]
    assert not (run_dir / "check.json").exists() and (run_dir / "inner-link").is_symlink()
    assert target.read_text() == "precious\n"


def test_streams_keep_a_bounded_head_and_tail(tmp_path: Path) -> None:
    script = (
        "for i in $(seq 1 20000); do echo line-$i; done; echo err-start >&2; head -c 300000 /dev/zero >&2"
    )
    run, out, err = _run(tmp_path, script, Confinement(stream_head_bytes=1000, stream_tail_bytes=500))
    total = sum(len(f"line-{i}\n") for i in range(1, 20001))
    assert run.streams["stdout"].bytes == total and run.streams["stdout"].truncated
    assert out.startswith("line-1\nline-2\n")
    assert out.endswith("line-19999\nline-20000\n")
    assert f"bytes of stdout omitted; kept the first 1000 and the last 500 of {total}]" in out
    assert run.streams["stderr"].bytes == len("err-start\n") + 300000
    assert run.streams["stderr"].kept_bytes == 1500
    assert len(out.encode()) < 1000 + 500 + 200


def test_sandbox_modes_without_bubblewrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIG_BWRAP", "/nonexistent/bwrap")
    assert find_bwrap() is None
    plan, status = resolve("auto", [], [])
    assert plan is None and not status.active
    assert status.warning() is not None and status.warning().startswith("sandbox: the agent ran unconfined")
    with pytest.raises(SandboxError, match="bubblewrap not found; install the Debian package bubblewrap"):
        resolve("require", [], [])
    plan, status = resolve("off", [], [])
    # Under root it goes on to say the agent runs as root (tests/test_fallback_uid.py).
    assert plan is None and (status.detail or "").startswith("disabled with --sandbox off")


def test_interrupted_run_kills_its_agents(tmp_path: Path) -> None:
    """Ctrl-C of `rig run`: exit 130, no agent left running, nothing appended, resumable.

    Started as a background job is (SIGINT ignored): `rig run` installs its own Ctrl-C.
    """
    exp = tmp_path / "sleepy.toml"
    exp.write_text(
        'harness = "scripted"\ntasks = ["t1_fix_pagination"]\nworkers = 1\n'
        '[[conditions]]\nname = "slow"\nharness_options = { policy = "sleep", seconds = 300 }\n'
    )
    env = {**os.environ, "RIG_RUNS_ROOT": str(tmp_path / "runs")}
    proc = subprocess.Popen(
        [f"{REPO_BIN}/rig", "run", str(exp), "--results-root", str(tmp_path / "results")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=background_job,
    )
    # Only the agent's command line names its session inside the attempt folder.
    session_root = str(tmp_path / "results" / "sleepy" / "runs")
    try:
        deadline = time.monotonic() + 60
        while not _alive(session_root) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _alive(session_root), "the agent never started"
        _out, err = interrupt(proc, 60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted; running agents were killed" in err
    assert _alive(session_root) == []
    assert not (tmp_path / "results" / "sleepy" / "runs.jsonl").exists()


def _status_kib(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


@pytest.mark.slow
def test_gigabytes_on_the_streams_keep_the_runner_under_300_mb(tmp_path: Path) -> None:
    """A harness flooding stdout and stderr, each with more than the runner may hold (300 MB):
    bounded logs, bounded runner memory."""
    mib = 1024**2
    # Either stream alone, held whole, would pass the bound; more would only cost CI time.
    out, err = 512 * mib, 384 * mib
    exp = tmp_path / "flood.toml"
    exp.write_text(
        'harness = "scripted"\ntasks = ["t1_fix_pagination"]\n'
        f"[limits]\nstream_head_bytes = {mib}\nstream_tail_bytes = {mib}\n"
        '[[conditions]]\nname = "flood"\n'
        f'harness_options = {{ policy = "flood", stdout_bytes = {out}, stderr_bytes = {err} }}\n'
    )
    env = {**os.environ, "RIG_RUNS_ROOT": str(tmp_path / "runs")}
    proc = subprocess.Popen(
        [f"{REPO_BIN}/rig", "run", str(exp), "--results-root", str(tmp_path / "results")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak_kib = 0
    while proc.poll() is None:
        # VmHWM is the peak so far: a spike between two samples is not missed.
        peak_kib = max(peak_kib, _status_kib(proc.pid, "VmHWM") or 0)
        time.sleep(0.05)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert 0 < peak_kib * 1024 < 300 * mib, f"runner peak RSS {peak_kib / 1024:.0f} MiB"
    record = json.loads((tmp_path / "results" / "flood" / "runs.jsonl").read_text().splitlines()[0])
    streams = record["agent"]["streams"]
    # stdout also carries the agent's few session events.
    assert out < streams["stdout"]["bytes"] < out + 64 * 1024
    assert streams["stdout"]["kept_bytes"] == 2 * mib and streams["stdout"]["truncated"]
    assert streams["stderr"] == {"bytes": err, "kept_bytes": 2 * mib, "truncated": True}
    attempt = tmp_path / "results" / "flood" / record["artifacts"]
    for name in ("stdout.log", "stderr.log"):
        assert 2 * mib < (attempt / name).stat().st_size < 2 * mib + 200


def test_agents_of_a_dead_runner_are_reaped_and_a_live_runners_are_not(tmp_path: Path) -> None:
    """What a resume after kill -9 of the runner does first (rig.run.runner.execute)."""
    marker = f"96{os.getpid() % 1000:03d}"
    mine = process_identity(os.getpid())
    assert mine is not None
    dead, alive = (
        subprocess.Popen(["sleep", f"{marker}{i}"], env={"RIG_RUNNER": runner}, start_new_session=True)
        for i, runner in ((1, "4194304:1"), (2, mine))
    )
    try:
        assert reap_orphans() >= 1
        dead.wait(timeout=10)
        assert dead.returncode == -signal.SIGKILL
        assert alive.poll() is None
    finally:
        alive.kill()
        alive.wait()


def _rig(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "RIG_RUNS_ROOT": str(tmp_path / "runs"), **env}
    return subprocess.run(
        [f"{REPO_BIN}/rig", *args], env=full_env, capture_output=True, text=True, timeout=600
    )


def test_doctor_reports_each_protection_and_whether_it_is_active(tmp_path: Path) -> None:
    names = [
        "sandbox",
        "network",
        "provider keys",
        "runs root",
        "verification copies",
        "process cleanup",
        "runner death",
        "file size limit",
        "stream bounds",
        "protected files",
        "verification",
        "audit",
    ]
    here = json.loads(_rig(tmp_path, "doctor", "--json").stdout)
    assert [p["name"] for p in here] == names
    sandbox = here[0]
    assert sandbox["active"] and sandbox["detail"].startswith("bubblewrap "), "make setup installs bubblewrap"
    copies = here[4]
    assert copies["active"] and copies["detail"].startswith(f"/dev/shm/rig-{os.getuid()}, in memory: up to ")
    assert here[5]["active"] and here[5]["detail"].startswith("bwrap-pidns: ")
    on_disk = json.loads(_rig(tmp_path, "doctor", "--json", RIG_VERIFY_ROOM_MIB="0").stdout)[4]
    assert (
        on_disk["detail"]
        == f"{tmp_path / 'runs'}, beside the workspaces under the runs root ($RIG_VERIFY_ROOM_MIB is 0)"
    )
    without = _rig(tmp_path, "doctor", "--json", "--strict", RIG_BWRAP="/nonexistent/bwrap")
    assert without.returncode == 1
    sandbox = json.loads(without.stdout)[0]
    assert not sandbox["active"] and "install the Debian package bubblewrap" in sandbox["detail"]
    table = _rig(tmp_path, "doctor").stdout
    assert "sandbox" in table and "active" in table


def test_without_bubblewrap_every_record_carries_a_warning(tmp_path: Path) -> None:
    exp = tmp_path / "plain.toml"
    exp.write_text(
        'harness = "scripted"\ntasks = ["t1_fix_pagination", "t3_fix_check"]\n'
        '[[conditions]]\nname = "sol"\nharness_options = { policy = "solution" }\n'
    )
    results = tmp_path / "results"
    refused = _rig(
        tmp_path,
        "run",
        str(exp),
        "--results-root",
        str(results),
        "--sandbox",
        "require",
        RIG_BWRAP="/nonexistent/bwrap",
    )
    assert refused.returncode == 2 and not results.exists() and not (tmp_path / "runs").exists()
    assert refused.stderr.strip().splitlines() == [
        "error: --sandbox require: bubblewrap not found; install the Debian package bubblewrap "
        "(apt-get install bubblewrap); or run with --sandbox auto to accept the risk"
    ]
    done = _rig(tmp_path, "run", str(exp), "--results-root", str(results), RIG_BWRAP="/nonexistent/bwrap")
    assert done.returncode == 0, done.stderr
    assert "sandbox: the agent ran unconfined" in done.stderr
    records = [json.loads(line) for line in (results / "plain" / "runs.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["success"] for r in records)
    for record in records:
        assert record["sandbox"]["active"] is False and record["agent"]["sandboxed"] is False
        # Files unconfined, processes not: each agent had its cgroup leaf.
        assert record["sandbox"]["processes"] == "cgroup"
        assert [w for w in record["warnings"] if w.startswith("sandbox: the agent ran unconfined")]


def test_a_session_directory_grows_only_by_its_own_files_never_through_a_link(tmp_path: Path) -> None:
    """The silence watchdog measures a session directory the agent can write to: a file that grows
    behind a symlink in it is no activity, and a symlink loop in it is not followed."""
    workdir, run_dir = tmp_path / "work", tmp_path / "results" / "attempt-1"
    workdir.mkdir()
    session = run_dir / "home" / "sessions"
    (session / "day").mkdir(parents=True)
    outside = tmp_path / "outside.log"
    outside.write_text("")
    (session / "day" / "linked.jsonl").symlink_to(outside)
    (session / "day" / "loop").symlink_to(session, target_is_directory=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(run_dir / "home"), "LANG": "C.UTF-8"}
    # Writes nothing on its streams; only the file outside grows, for 20 s.
    script = f"for i in $(seq 1 100); do echo line >> {outside}; sleep 0.2; done"

    run = run_agent_process(["bash", "-c", script], workdir, env, run_dir, 60, 2.0, session)

    assert run.stalled and run.exit_code is None, "growth behind a link kept it alive"
    assert run.wall_s < 10
    # The same growth in a file of the session's own is activity.
    script = f"for i in $(seq 1 15); do echo line >> {session}/day/own.jsonl; sleep 0.2; done"
    run = run_agent_process(["bash", "-c", script], workdir, env, tmp_path / "attempt-2", 60, 2.0, session)
    assert run.exit_code == 0 and not run.stalled

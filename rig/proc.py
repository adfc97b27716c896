"""Subprocesses with an explicit environment, their own process group and a hard timeout."""

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Every process an agent starts inherits this variable: the reaper finds by it the ones that left
# the agent's process group (setsid, double fork) after the agent itself is gone.
AGENT_TOKEN_VAR = "RIG_AGENT_TOKEN"
# Which runner started the agent ("pid:start time"): an agent whose runner is gone is an orphan.
RUNNER_VAR = "RIG_RUNNER"
_REAP_ROUNDS = 100
_REAP_PAUSE_S = 0.02

# Only what an interpreter needs. Anything inherited (CI, PYTHONPATH, proxies, user config)
# could change what a check or an agent does without showing up in any record.
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


def scrubbed_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A minimal environment for a verification subprocess, with `home` as HOME."""
    env = {
        "PATH": BASE_PATH,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "NO_COLOR": "1",
        # Only the plugins verification names: an installed distribution cannot add its own.
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    env.update(extra or {})
    return env


@dataclass
class Completed:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float


def run_bounded(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> Completed:
    """Run `cmd` in its own session; on timeout the whole process group is killed."""
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        out, err = proc.communicate()
        timed_out = True
    kill_group(proc.pid)  # children left behind by a finished command
    return Completed(None if timed_out else proc.returncode, out, err, timed_out, time.monotonic() - start)


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group; already gone is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _environments() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, NAME=value entries) of every live process whose environment this process may read."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        yield int(entry.name), environ.split(b"\0")


def processes_with_env(name: str, value: str) -> list[int]:
    """Pids of live processes whose environment holds `name=value` (zombies have none)."""
    needle = f"{name}={value}".encode()
    return [pid for pid, environ in _environments() if needle in environ]


def reap(token: str) -> int:
    """SIGKILL every process carrying the agent `token` until none is left; how many there were.

    Repeated because a process may fork between the scan and the kill.
    """
    killed: set[int] = set()
    for _ in range(_REAP_ROUNDS):
        pids = [p for p in processes_with_env(AGENT_TOKEN_VAR, token) if p != os.getpid()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        killed.update(pids)
        time.sleep(_REAP_PAUSE_S)
    return len(killed)


def process_identity(pid: int) -> str | None:
    """ "pid:start time" of a live process (a reused pid gets another start time), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count fields after the last ")".
    fields = stat.rsplit(")", 1)[1].split()
    return f"{pid}:{fields[19]}"


def reap_orphans() -> int:
    """Kill agents whose runner died (kill -9 leaves their helpers behind); how many processes."""
    killed = 0
    prefix = f"{RUNNER_VAR}=".encode()
    for pid, environ in _environments():
        runner = next((v[len(prefix) :] for v in environ if v.startswith(prefix)), None)
        if runner is None or process_identity(int(runner.split(b":")[0])) == runner.decode():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed

"""Subprocesses with an explicit environment, their own process group and a hard timeout."""

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

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

"""Starting and stopping the rig's long-running commands as a shell's background job would."""

import signal
import subprocess
import time
from pathlib import Path


def background_job() -> None:
    """preexec_fn: SIGINT ignored, as a shell starts a background job or nohup a command."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# What `timeout` and an impatient user send: SIGTERM, another 10 ms later, then Ctrl-C.
BURST = (signal.SIGTERM, signal.SIGTERM, signal.SIGINT)


def interrupt(
    proc: subprocess.Popen, timeout: float = 30, signum: int | tuple[int, ...] = signal.SIGINT
) -> tuple[str, str]:
    """`signum` (Ctrl-C unless told; a tuple: each in turn, 10 ms apart), then its output; a process
    that outlives `timeout` is killed before the test fails."""
    for n, each in enumerate(signum if isinstance(signum, tuple) else (signum,)):
        if n:
            time.sleep(0.01)
        proc.send_signal(each)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def running(marker: str) -> bool:
    """Whether a live process's command line holds `marker`."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False


def wait_for(marker: str, proc: subprocess.Popen, timeout: float) -> None:
    """Return once a live process's command line holds `marker` (a step `proc` started); fail if
    `proc` ends or `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while not running(marker):
        assert proc.poll() is None, f"it ended (exit {proc.returncode}) before {marker!r} ran"
        assert time.monotonic() < deadline, f"{marker!r} never ran in {timeout:.0f}s"
        time.sleep(0.1)

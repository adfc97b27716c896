"""Starting and stopping the rig's long-running commands as a shell's background job would."""

import signal
import subprocess
from pathlib import Path


def background_job() -> None:
    """preexec_fn: SIGINT ignored, as a shell starts a background job or nohup a command."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def interrupt(proc: subprocess.Popen, timeout: float = 30) -> tuple[str, str]:
    """Ctrl-C, then its output; a process that ignores it is killed before the test fails."""
    proc.send_signal(signal.SIGINT)
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

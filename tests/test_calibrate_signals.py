"""`rig calibrate` stops on Ctrl-C and SIGTERM whatever it inherited (a shell's background job and
nohup start it with Ctrl-C ignored): at once, with one line, its scratch folder removed and no pins
saved; the harness calibration kills the checks in flight instead of waiting out their timeouts."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import BURST, background_job, interrupt

RIG = str(Path(sys.executable).with_name("rig"))
STOPPED = "error: interrupted; the calibration stopped, no pins were saved"


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "RIG_CALIBRATION_DIR": str(tmp_path / "pins")}
    return subprocess.Popen(
        [RIG, "calibrate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=background_job,
    )


def first_result(proc: subprocess.Popen[str]) -> str:
    """The first [PASS] or [FAIL] line it prints (the calibration is under way)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(("[PASS]", "[FAIL]")):
            return line
    raise AssertionError(f"no result before it ended: {proc.wait()}")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, BURST], ids=["ctrl-c", "sigterm", "burst"])
def test_the_oracle_calibration_stops_at_once(tmp_path: Path, sig: signal.Signals | tuple[int, ...]) -> None:
    proc = start(tmp_path)
    try:
        first_result(proc)
        _out, err = interrupt(proc, 60, sig)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == STOPPED
    assert not list((tmp_path / "tmp").glob("rig-calibrate-*"))
    assert not (tmp_path / "pins").exists() or not any((tmp_path / "pins").rglob("*.json"))


@pytest.mark.slow
def test_the_harness_calibration_kills_its_checks_in_flight(tmp_path: Path) -> None:
    # Its stall, never-answer and tool-hang checks would each wait 20 s of silence.
    proc = start(tmp_path, "--harness", "pi", "--task", "t1_fix_pagination", "--workers", "1")
    try:
        first_result(proc)
        signalled = time.monotonic()
        _out, err = interrupt(proc, 60, signal.SIGTERM)
        waited = time.monotonic() - signalled
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == STOPPED
    assert waited < 15, f"it waited {waited:.0f}s for its checks"
    assert not list((tmp_path / "tmp").glob("rig-calibrate-*"))

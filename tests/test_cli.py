"""The command line stays instant (heavy analysis libraries load only in the commands using them),
and its readers, `rig status` and `rig report`, only read: they write nothing into the results or
runs folders and start no harness.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

RIG = str(Path(sys.executable).with_name("rig"))


def test_help_lists_commands():
    proc = subprocess.run([RIG, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "calibrate" in proc.stdout


def test_cli_import_does_not_load_pandas_scipy_or_matplotlib():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from rig.cli import app\n"
        "result = CliRunner().invoke(app, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "heavy = sorted(m for m in ('pandas', 'scipy', 'matplotlib', 'numpy') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


# -- status and report only read -------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "tests" / "data" / "results_small" / "results_small"
SMALL_CONFIG = REPO / "tests" / "data" / "results_small.toml"


def listing(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory below `roots` with its size and mtime: what a command wrote."""
    found = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [*dirnames, *filenames]:
                st = os.lstat(os.path.join(dirpath, name))
                found[os.path.join(dirpath, name)] = (st.st_size, st.st_mtime_ns)
    return found


def rig(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RIG_RESULTS_ROOT": str(tmp_path / "results"),
        "RIG_RUNS_ROOT": str(tmp_path / "runs"),
        **extra,
    }
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=300, env=env)


def small_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "results" / "results_small"
    shutil.copytree(SMALL, folder)
    return folder


def test_status_and_report_write_nothing(tmp_path: Path) -> None:
    folder = small_copy(tmp_path)
    before = listing(folder)
    proc = rig(tmp_path, "status", str(SMALL_CONFIG))
    assert proc.returncode == 0, proc.stderr
    assert "t5_migration" in proc.stdout and "3/3" in proc.stdout
    proc = rig(tmp_path, "report", str(SMALL_CONFIG), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "report.md").is_file()
    assert listing(folder) == before
    assert not (tmp_path / "runs").exists(), "a reader created the runs root"


def test_status_starts_no_harness(tmp_path: Path) -> None:
    marker = tmp_path / "harness-started"
    fake = tmp_path / "pi"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\necho 0.0.1\n")
    fake.chmod(0o755)
    exp = tmp_path / "pi_status.toml"
    exp.write_text('harness = "pi"\ntasks = ["t1_fix_pagination"]\n[[conditions]]\nname = "plain"\n')
    proc = rig(tmp_path, "status", str(exp), RIG_PI_BIN=str(fake))
    assert proc.returncode == 0, proc.stderr
    assert "0/1" in proc.stdout
    assert not marker.exists(), "rig status started the harness CLI"
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()


def test_status_refuses_a_changed_design_without_writing(tmp_path: Path) -> None:
    folder = small_copy(tmp_path)
    before = listing(folder)
    changed = tmp_path / "results_small.toml"
    changed.write_text(SMALL_CONFIG.read_text().replace("repetitions = 3", "repetitions = 4"))
    proc = rig(tmp_path, "status", str(changed))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "different design" in proc.stderr
    # More workers is the same design.
    more = tmp_path / "more" / "results_small.toml"
    more.parent.mkdir()
    more.write_text(SMALL_CONFIG.read_text().replace("workers = 2", "workers = 6"))
    assert rig(tmp_path, "status", str(more)).returncode == 0
    assert listing(folder) == before


def test_duplicate_run_ids_are_reported_and_counted_once(tmp_path: Path) -> None:
    folder = small_copy(tmp_path)
    lines = (folder / "runs.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert not first["success"]
    # A second writer's record of the same run, with another verdict: the first one counts.
    (folder / "runs.jsonl").write_text("\n".join([*lines, json.dumps({**first, "success": True})]) + "\n")
    proc = rig(tmp_path, "status", str(SMALL_CONFIG))
    assert proc.returncode == 0, proc.stderr
    warning = f"warning: {folder / 'runs.jsonl'}: dropped 1 duplicate records of 1 run ids"
    assert warning in proc.stderr and first["run_id"] in proc.stderr
    row = next(
        line for line in proc.stdout.splitlines() if "t1_fix_pagination" in line and "no_agents_md" in line
    )
    assert "3/3" in row and " 1 " in row  # still one success of three
    proc = rig(tmp_path, "report", str(SMALL_CONFIG), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count(warning) == 1
    assert "30 scored runs" in (tmp_path / "out" / "report.md").read_text()


def test_a_record_of_a_newer_rig_stops_status_and_report(tmp_path: Path) -> None:
    folder = small_copy(tmp_path)
    record = json.loads((folder / "runs.jsonl").read_text().splitlines()[0])
    with (folder / "runs.jsonl").open("a") as f:
        f.write(json.dumps({**record, "run_id": "x__y__r09", "record_schema": 99}) + "\n")
    for args in (["status"], ["report", "--out", str(tmp_path / "out")]):
        proc = rig(tmp_path, *args, str(SMALL_CONFIG))
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
        assert "record_schema 99 is newer" in proc.stderr and "upgrade rig" in proc.stderr

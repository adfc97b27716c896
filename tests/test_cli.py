"""The command line stays instant: heavy analysis libraries load only in the commands using them."""

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

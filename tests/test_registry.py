"""Harnesses come from one registry, which an installed package extends through an entry point."""

import json
import os
import subprocess
import sys
from pathlib import Path

from harnesses.registry import BUILTIN, calibrated_names, harness_names, make_adapter
from rig.packs.tasks import load_tasks

RIG = str(Path(sys.executable).with_name("rig"))
PLUGIN = '''"""A third-party harness: the scripted agent under another name."""

from harnesses.scripted.adapter import ScriptedHarness


class EchoHarness(ScriptedHarness):
    name = "echo-scripted"
'''
EXPERIMENT = """harness = "echo-scripted"
tasks = ["t1_fix_pagination"]
[[conditions]]
name = "sol"
harness_options = { policy = "solution" }
"""


def _install_plugin(site: Path, name: str, target: str) -> None:
    """A package on sys.path with the dist-info an installer writes, entry point included."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "echo_plugin.py").write_text(PLUGIN)
    info = site / "echo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[rig.harnesses]\n{name} = {target}\n")


def _rig(tmp_path: Path, site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "RIG_RESULTS_ROOT": str(tmp_path / "results"),
        "RIG_RUNS_ROOT": str(tmp_path / "runs"),
    }
    return subprocess.run([RIG, *args], capture_output=True, text=True, env=env, timeout=600)


def test_every_list_of_names_comes_from_the_registry():
    assert harness_names() == tuple(BUILTIN)
    assert {"scripted", "pi", "claude-code", "codex"} <= set(harness_names())
    # The scripted agent has no model to mock; every real CLI is calibrated.
    assert calibrated_names() == tuple(name for name in BUILTIN if name != "scripted")
    task = load_tasks(only=["t1_fix_pagination"])[0]
    assert [make_adapter(name, task).name for name in harness_names()] == list(harness_names())


def test_an_installed_package_adds_a_harness_that_rig_run_uses(tmp_path):
    site = tmp_path / "site"
    _install_plugin(site, "echo-scripted", "echo_plugin:EchoHarness")
    exp = tmp_path / "echo.toml"
    exp.write_text(EXPERIMENT)

    proc = _rig(tmp_path, site, "run", str(exp))

    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = (tmp_path / "results" / "echo" / "runs.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["harness"] == "echo-scripted" and record["success"] is True


def test_a_package_reusing_a_builtin_name_is_one_clear_error(tmp_path):
    site = tmp_path / "site"
    _install_plugin(site, "pi", "echo_plugin:EchoHarness")
    exp = tmp_path / "echo.toml"
    exp.write_text(EXPERIMENT.replace("echo-scripted", "scripted"))

    proc = _rig(tmp_path, site, "run", str(exp))

    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: the rig.harnesses entry point pi = 'echo_plugin:EchoHarness' reuses the name of "
        "'harnesses.pi.adapter:PiHarness'; rename it in its package's pyproject.toml"
    ]
    assert not (tmp_path / "results" / "scripted").exists()

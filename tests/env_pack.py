"""Packs around tests/data/env_project, a real small project (setuptools, src layout, a runtime
dependency with one of its own, an extra `test` with pytest), whose environments tests build
offline: uv installs from build/wheels, which `make setup-dev` fills (tests/data/env-wheels.txt)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from rig.paths import REPO_ROOT

RIG = str(Path(sys.executable).with_name("rig"))
PROJECT = REPO_ROOT / "tests" / "data" / "env_project"
WHEELS = REPO_ROOT / "build" / "wheels"

MANIFEST = """name = "envproject"
[gate]
command = ["pytest"]
run = ["{python}", "-m", "pytest"]
report = "exit-code"
[runner]
kind = "pytest"
"""


# An experiment of the scripted harness on `pack`: a `probe` condition running shell `commands` (a
# JSON list), and the reference solution.
EXPERIMENT = """name = "{name}"
harness = "scripted"
model = "scripted"
pack = "{pack}"
tasks = "all"
repetitions = 1
workers = 1
seed = 5
[timeouts]
agent_s = 120
stall_s = 60

[[conditions]]
name = "probe"
harness_options = {{ policy = "script", commands = {commands} }}

[[conditions]]
name = "solution"
harness_options = {{ policy = "solution" }}
"""


def make_pack(where: Path, environment: str = 'extras = ["test"]\n', manifest: str = MANIFEST) -> Path:
    """A pack around tests/data/env_project with the given [environment] body."""
    for folder in ("tasks", "hidden_tests"):
        (where / folder).mkdir(parents=True, exist_ok=True)
    shutil.copytree(PROJECT, where / "fixture")
    (where / "pack.toml").write_text(manifest + "[environment]\n" + environment)
    return where


def offline(cache: Path, **extra: str) -> dict[str, str]:
    """The environment of an offline build into `cache`: uv finds every wheel in build/wheels."""
    assert (WHEELS / "setuptools-84.2.1-py3-none-any.whl").is_file(), (
        "run `make setup-dev` (fills build/wheels)"
    )
    return {
        **os.environ,
        "RIG_ENV_DIR": str(cache),
        "RIG_WHEELS": str(WHEELS),
        "UV_OFFLINE": "1",
        "UV_CACHE_DIR": str(cache.parent / "uv-cache"),
        **extra,
    }


def rig(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The rig CLI under `env`."""
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=timeout, env=env)

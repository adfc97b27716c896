"""A condition that runs another version of its harness CLI: installed from npm into the rig's cache.

`make setup-dev` fills npm's own cache with the version named in tests/data/npm-prefetch.txt (the
tests run in a loopback-only network namespace, so npm installs it from there, as it would from
the registry); the rig's version cache starts empty in every test.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harnesses.registry import adapter_class, calibrated_names
from harnesses.versions import MARKER
from rig.paths import REPO_ROOT

RIG = str(Path(sys.executable).with_name("rig"))
PREFETCHED = (Path(__file__).parent / "data" / "npm-prefetch.txt").read_text().split()
PACKAGE, _, OLD_PI = PREFETCHED[0].rpartition("@")
EXPERIMENT = """\
title = "Did the Pi upgrade change anything?"
harness = "{harness}"
model = "mock-model"
tasks = ["t1_fix_pagination"]
repetitions = 1
workers = 2
seed = 7

[provider]
kind = "mock"

[[conditions]]
name = "older"
harness_version = "{version}"
harness_options = {{ mock_policy = "solution" }}

[[conditions]]
name = "pinned"
harness_options = {{ mock_policy = "solution" }}
"""


def _rig(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "RIG_HARNESS_CACHE": str(tmp_path / "cache"),
        "RIG_RESULTS_ROOT": str(tmp_path / "results"),
        "RIG_RUNS_ROOT": str(tmp_path / "runs"),
    }
    return subprocess.run([RIG, *args], capture_output=True, text=True, env=env, timeout=900)


def _experiment(tmp_path: Path, name: str, harness: str = "pi", version: str = OLD_PI) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(EXPERIMENT.format(harness=harness, version=version))
    return path


def _pinned_pi() -> str:
    lock = json.loads((Path(__file__).parents[1] / "harnesses/node/package-lock.json").read_text())
    return lock["packages"][f"node_modules/{PACKAGE}"]["version"]


@pytest.mark.slow
def test_a_condition_runs_the_version_it_names_and_the_record_pins_it(tmp_path):
    assert OLD_PI != _pinned_pi()
    proc = _rig(tmp_path, "run", str(_experiment(tmp_path, "upgrade")))

    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = tmp_path / "cache" / f"{PACKAGE.replace('/', '+')}@{OLD_PI}"
    assert f"installing {PACKAGE}@{OLD_PI} from the npm registry into {folder} (once)" in proc.stderr
    assert f"condition older: pi {OLD_PI}" in proc.stderr
    # The install is kept with its lock file, keyed by package and version.
    lock = json.loads((folder / "package-lock.json").read_text())
    assert lock["packages"][f"node_modules/{PACKAGE}"]["version"] == OLD_PI
    assert json.loads((folder / MARKER).read_text())["version"] == OLD_PI
    records = {
        r["condition"]: r
        for r in map(json.loads, (tmp_path / "results/upgrade/runs.jsonl").read_text().splitlines())
    }
    assert {
        c: (r["success"], r["harness_version"], r["pins"]["harness_version"]) for c, r in records.items()
    } == {
        "older": (True, OLD_PI, OLD_PI),
        "pinned": (True, _pinned_pi(), _pinned_pi()),
    }
    older = records["older"]
    # The agent that ran was the installed copy, and it spoke to the mock like the pinned one.
    attempt = tmp_path / "results/upgrade" / older["artifacts"]
    assert json.loads((attempt / "record.json").read_text())["agent"]["command"][0] == str(
        folder / "node_modules/.bin/pi"
    )
    assert older["metrics"]["input_tokens"] == records["pinned"]["metrics"]["input_tokens"] > 0

    # A second experiment reuses the installed version.
    again = _rig(tmp_path, "run", str(_experiment(tmp_path, "again")))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "installing" not in again.stderr
    assert f"condition older: pi {OLD_PI}" in again.stderr


def test_a_version_npm_cannot_install_stops_before_anything_is_written(tmp_path):
    proc = _rig(tmp_path, "run", str(_experiment(tmp_path, "missing", version="0.0.0-not-published")))

    assert proc.returncode == 2
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: npm install {PACKAGE}@0.0.0-not-published failed (")
    assert error.endswith(
        f"check that the version exists (`npm view {PACKAGE} versions`) and that the registry is reachable"
    )
    assert not (tmp_path / "results" / "missing").exists()
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [
        f"{PACKAGE.replace('/', '+')}@0.0.0-not-published.lock"
    ]


@pytest.mark.parametrize(
    ("harness", "version", "error"),
    [
        (
            "pi",
            "^0.73.0",
            "conditions.0.harness_version: '^0.73.0' is not an exact version; give one such as "
            "1.2.3, not a range or tag; fix the config",
        ),
        (
            "pi",
            "latest",
            "conditions.0.harness_version: 'latest' is not an exact version; give one such as "
            "1.2.3, not a range or tag; fix the config",
        ),
        (
            "scripted",
            "1.0.0",
            "conditions.older.harness_version: harness 'scripted' cannot run another "
            "version of its CLI; remove harness_version",
        ),
    ],
)
def test_a_harness_version_that_cannot_be_is_refused_at_load(tmp_path, harness, version, error):
    path = _experiment(tmp_path, "bad", harness=harness, version=version)
    proc = _rig(tmp_path, "run", str(path))

    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: {path}: {error}"]
    assert not (tmp_path / "cache").exists()


def test_every_pinned_cli_has_a_captured_run_in_its_version_corpus():
    # Each CLI harness keeps, per version it has been run at, a captured run its parser is tested
    # on (tests/data/<harness>/versions/<version>); the version rig pins must be among them.
    pins = json.loads((REPO_ROOT / "harnesses" / "node" / "package.json").read_text())["dependencies"]
    missing = []
    for name in calibrated_names():
        version = pins[adapter_class(name).package]
        folder = REPO_ROOT / "tests" / "data" / name.replace("-", "_") / "versions" / version
        if not (folder / "version.json").is_file():
            missing.append(
                f"{name} {version}: capture it into {folder} ({folder.parent / 'README.md'} says how)"
            )
    assert len(calibrated_names()) == 5 and not missing, missing

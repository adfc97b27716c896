"""rig installs like any Python tool: its wheel carries the built-in pack, packs/, the example
experiments, the extensions and the harness lock, and the commit it was built from; installed into a
fresh venv outside the checkout, it calibrates, runs and pins that commit without the checkout.

The wheel is built as a user builds it (`uv build --wheel`, setuptools in an isolated build
environment) and installed as `uv tool install` does, both offline from build/rig-wheels, which
`make setup-dev` fills with setuptools and every dependency.
"""

import os
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harnesses.registry import adapter_class, harness_names
from rig.paths import REPO_ROOT
from rig.version import rig_version

pytestmark = pytest.mark.slow

WHEELS = REPO_ROOT / "build" / "rig-wheels"
UV = Path(sys.executable).with_name("uv")
# What setup.py ships of the checkout's top level, under rig/shipped/.
SHIPPED = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["rig"]["shipped"]


def _tracked(*paths: str) -> set[str]:
    listing = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--", *paths],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return {name for name in listing.split("\0") if name and (REPO_ROOT / name).is_file()}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rig's wheel, built from this checkout."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [
            UV,
            "build",
            "--wheel",
            "--offline",
            "--no-index",
            "--find-links",
            WHEELS,
            "--out-dir",
            out,
            REPO_ROOT,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("rig-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv, outside the checkout, with the wheel and its dependencies: its bin/ folder."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    proc = subprocess.run(
        [UV, "pip", "install", "--python", venv / "bin" / "python", "--offline", "--no-index"]
        + ["--find-links", WHEELS, "--link-mode", "copy", wheel],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield venv / "bin"


def _rig(bin_dir: Path, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The installed rig alone: no PYTHONPATH may point back at the checkout.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [bin_dir / "rig", *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def test_the_wheel_carries_the_checkouts_top_level_and_its_commit(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        built = archive.read("rig/BUILT_VERSION").decode().strip()
    shipped = {name.removeprefix("rig/shipped/") for name in names if name.startswith("rig/shipped/")}
    # Exactly the tracked files: every task, fixture file, hidden test, pack, experiment and
    # extension, and nothing the checkout holds untracked (results, node_modules, caches).
    assert shipped == _tracked(*SHIPPED)
    assert {"pack.toml", "experiments/demo_agents_md.toml", "packs/notes-js/pack.toml"} <= shipped
    assert {"harnesses/node/package.json", "harnesses/node/package-lock.json"} <= names
    # What holds a CLI open after its answer in `rig calibrate --harness` (adapters' silent_after_final).
    extensions = {
        Path(e).relative_to(REPO_ROOT).as_posix()
        for name in harness_names()
        for e in (adapter_class(name).silent_after_final or {}).get("extensions", [])
    }
    assert extensions and extensions <= names
    assert "rig/view/templates/layout.html.j2" in names
    assert not [n for n in names if "node_modules" in n or "__pycache__" in n or n.endswith(".pyc")]
    assert built == rig_version()


def test_an_installed_rig_calibrates_and_runs_without_the_checkout(
    installed: Path, wheel: Path, tmp_path: Path
) -> None:
    where = subprocess.run(
        [installed / "python", "-c", "import rig.paths as p; print(p.IN_CHECKOUT, p.REPO_ROOT)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=True,
    ).stdout.split()
    shipped = installed.parent / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    shipped = shipped / "site-packages" / "rig" / "shipped"
    assert where == ["False", str(shipped)]
    before = _tree(shipped)

    version = _rig(installed, "version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == rig_version(), version.stderr

    calibrate = _rig(installed, "calibrate", cwd=tmp_path)
    assert calibrate.returncode == 0, calibrate.stdout + calibrate.stderr
    assert "all PASS" in calibrate.stdout

    # The shipped experiment runs from the installed package, its results beside the user.
    run = _rig(installed, "run", shipped / "experiments" / "scripted_smoke.toml", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    runs = (tmp_path / "rig-results" / "scripted_smoke" / "runs.jsonl").read_text().splitlines()
    assert len(runs) == 12 and all(f'"rig_version": "{rig_version()}"' in line for line in runs)
    assert all('"success": true' in line for line in runs)

    init = _rig(installed, "init", "builtin:notes-js", cwd=tmp_path)
    assert init.returncode == 0 and (tmp_path / "notes-js.toml").is_file(), init.stderr
    # Nothing was written into the installed package.
    assert _tree(shipped) == before

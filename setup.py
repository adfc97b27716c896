"""What the wheel carries beyond the packages pyproject.toml names: the checkout's top level.

An installed rig needs the built-in pack (pack.toml, tasks/, fixtures/taskapp/, hidden_tests/ and
its environment lock), packs/, the example experiments and the extensions. The checkout keeps them
at its top level (docs/layout.md); the build copies them into the package's `shipped/` folder
(rig.paths reads them there), and writes the commit it was built from into BUILT_VERSION
(rig.version), so the records an installed rig writes pin the code that measured them.

In a git checkout only tracked files are shipped (never node_modules, caches or results); an sdist
carries the same files at its own top level and its wheel ships what is there.
"""

import importlib.util
import shutil
import subprocess
import tomllib
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# The checkout's top level as an installed rig reads it (rig/paths.py: REPO_ROOT).
SHIPPED: list[str] = PYPROJECT["tool"]["rig"]["shipped"]
# Never shipped, whatever a build from an sdist finds on disk.
LEFT_OUT = {"node_modules", "__pycache__", ".venv", "results", ".pytest_cache", ".ruff_cache"}


def _version_module() -> ModuleType:
    # rig/version.py by its path: the build environment has none of rig's dependencies.
    spec = importlib.util.spec_from_file_location("_rig_version", ROOT / "rig" / "version.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shipped_files() -> list[str]:
    """The files to ship, relative to the top level: git's tracked ones in a checkout, else (an
    unpacked sdist) every file under SHIPPED but the LEFT_OUT folders."""
    if (ROOT / ".git").exists():
        listing = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--", *SHIPPED],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        return sorted(name for name in listing.split("\0") if name and (ROOT / name).is_file())
    found = []
    for entry in SHIPPED:
        path = ROOT / entry
        candidates = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
        for file in candidates:
            relative = file.relative_to(ROOT)
            if file.is_file() and not file.is_symlink() and not LEFT_OUT & set(relative.parts):
                found.append(str(relative))
    return found


def _built_version() -> str | None:
    """The version of the source being built: its checkout's commit, or the one an sdist kept."""
    version = _version_module()
    release = PYPROJECT["project"]["version"]
    from_git = version.git_version(ROOT, release)
    if from_git:
        return from_git
    kept = ROOT / "rig" / version.BUILT_VERSION
    return kept.read_text(encoding="utf-8").strip() if kept.is_file() else None


class BuildPy(build_py):
    """The packages, then the shipped files under rig/shipped/ and BUILT_VERSION."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install reads the checkout itself
        package = Path(self.build_lib) / "rig"
        target = package / "shipped"
        # A stale copy from an earlier build would ship files the checkout no longer has.
        shutil.rmtree(target, ignore_errors=True)
        for name in _shipped_files():
            destination = target / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination)
        version = _built_version()
        if version:
            (package / _version_module().BUILT_VERSION).write_text(version + "\n", encoding="utf-8")


class Sdist(sdist):
    """The source with the shipped files and the commit it came from, so its wheel ships the same."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        for name in _shipped_files():
            destination = Path(base_dir) / name
            if not destination.exists():
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, destination)
        version = _built_version()
        if version:
            (Path(base_dir) / "rig" / _version_module().BUILT_VERSION).write_text(
                version + "\n", encoding="utf-8"
            )


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})

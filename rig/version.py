"""The rig's version, `rig.__version__`: it names the code that measured a record (it goes into
pins.rig_version).

In a git checkout it is the release plus the commit, "0.1.0+g<12 hex>", and
"+g<12 hex>.dirty.<8 hex>" when tracked files under rig/ or harnesses/ differ from that commit
(the 8 hex digits hash their contents, so two different uncommitted states get two versions).
Outside a checkout (an installed wheel) it is the version setup.py computed the same way from the
checkout it was built from, kept in the package's BUILT_VERSION file; the installed distribution's
bare release only for a build that had no checkout to read (an sdist built elsewhere).

setuptools-scm was not used: it computes the version when the package is built or installed, and
an editable install would keep reporting the commit it was installed at. The version is computed
here at first use instead (one `git status` subprocess, cached), never at import, so `rig --help`
and every command that does not pin a record start as fast as before.
"""

import hashlib
import os
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path

# The folders whose code decides what a record says; a change elsewhere (docs, tests, experiments)
# does not change what was measured.
VERSIONED_DIRS = ("rig", "harnesses")
# Written into the built package by setup.py: the version of the checkout the wheel was built from.
BUILT_VERSION = "BUILT_VERSION"
_GIT_TIMEOUT_S = 10


def _release() -> str:
    try:
        return metadata.version("rig")
    except metadata.PackageNotFoundError:
        # Imported from a checkout that was never installed: the commit still identifies it.
        return "0.0.0"


def _status_entries(output: str) -> tuple[str | None, list[str]]:
    """(HEAD commit or None, changed paths) from `git status --porcelain=v2 --branch -z`."""
    commit = None
    paths: list[str] = []
    fields = iter(output.split("\0"))
    for entry in fields:
        if entry.startswith("# branch.oid "):
            oid = entry.removeprefix("# branch.oid ")
            commit = None if oid == "(initial)" else oid
        elif entry.startswith("1 "):
            paths.append(entry.split(" ", 8)[8])
        elif entry.startswith("2 "):
            paths.append(entry.split(" ", 9)[9])
            next(fields, None)  # a rename's original path follows as its own field
        elif entry.startswith("u "):
            paths.append(entry.split(" ", 10)[10])
    return commit, paths


def git_version(root: Path, release: str) -> str | None:
    """`release` plus the commit of the git checkout at `root`; None if `root` is not one.

    A checkout git cannot read (git missing, a broken repository) gives "<release>+unknown": the
    code is a checkout's, but which commit is not known.
    """
    if not (root / ".git").exists():
        return None
    command = [
        "git",
        # Our own checkout: whoever owns it already controls the code this process runs.
        "-c",
        f"safe.directory={root}",
        "-C",
        str(root),
        "status",
        "--porcelain=v2",
        "--branch",
        "-z",
        "--untracked-files=no",
        "--",
        *VERSIONED_DIRS,
    ]
    # GIT_OPTIONAL_LOCKS=0: reading the version must never write the index another git holds. The
    # ceiling keeps a broken .git from making git report on some repository further up instead.
    env = {
        **os.environ,
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_CEILING_DIRECTORIES": str(root.parent),
        "LC_ALL": "C",
    }
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S, env=env, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return f"{release}+unknown"
    commit, changed = _status_entries(proc.stdout) if proc.returncode == 0 else (None, [])
    if commit is None:
        return f"{release}+unknown"
    version = f"{release}+g{commit[:12]}"
    if not changed:
        return version
    digest = hashlib.sha256()
    for name in sorted(set(changed)):
        path = root / name
        digest.update(name.encode() + b"\0")
        try:
            content = path.read_bytes()
        except OSError:
            # Deleted (or not a file): its absence is part of the state, and must differ from empty.
            content = b"\0<absent>"
        digest.update(content)
        digest.update(b"\0")
    return f"{version}.dirty.{digest.hexdigest()[:8]}"


@cache
def rig_version() -> str:
    """This rig's version: see the module docstring. Computed once per process."""
    release = _release()
    package = Path(__file__).resolve().parent
    return git_version(package.parent, release) or _built_version(package) or release


def _built_version(package: Path) -> str | None:
    try:
        return (package / BUILT_VERSION).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None

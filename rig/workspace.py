"""Building a workspace: a cache-free copy of the fixture with patches applied."""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

CACHE_NAMES = ("__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", "*.pyc", "*.egg-info")


class PatchError(Exception):
    """A patch that does not apply to the workspace."""


def copy_fixture(fixture: Path, dest: Path) -> Path:
    """Copy the fixture to `dest` (which must not exist), leaving caches behind."""
    shutil.copytree(fixture, dest, ignore=shutil.ignore_patterns(*CACHE_NAMES), symlinks=True)
    return dest


def apply_patch(workdir: Path, patch: Path) -> None:
    """Apply a git-style patch to `workdir`; an empty patch is a no-op."""
    if patch.stat().st_size == 0:
        return
    # The ceiling keeps git from treating an enclosing repository as the patch's root.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(workdir.parent)}
    proc = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", str(patch.resolve())],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["unknown error"])[0]
        raise PatchError(f"{patch}: does not apply ({first}); regenerate it against the fixture")


def tree_digest(root: Path, *, skip_caches: bool = True) -> str:
    """sha256 over every file's relative path and bytes, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if skip_caches and any(part in ("__pycache__", ".pytest_cache", ".ruff_cache") for part in rel.parts):
            continue
        if path.is_symlink():
            digest.update(f"L {rel.as_posix()} {os.readlink(path)}\n".encode())
        elif path.is_file():
            digest.update(f"F {rel.as_posix()}\n".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


# --- run workspaces -------------------------------------------------------------------------

CONTEXT_FILES = ("AGENTS.md", "CLAUDE.md")
RIG_GIT_DIR = "rig.git"
# Fixed identity and dates: the baseline commit's hash depends on the workspace content only.
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "rig",
    "GIT_AUTHOR_EMAIL": "rig@localhost",
    "GIT_COMMITTER_NAME": "rig",
    "GIT_COMMITTER_EMAIL": "rig@localhost",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}
# Config a workspace could carry that would make git run the agent's code during the rig's diff.
SAFE_GIT = ["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "diff.external="]


class WorkspaceError(Exception):
    """A workspace that cannot be prepared; the message names the cause and the fix."""


def default_runs_root() -> Path:
    """$RIG_RUNS_ROOT, else the user's cache directory (outside any repository)."""
    if os.environ.get("RIG_RUNS_ROOT"):
        return Path(os.environ["RIG_RUNS_ROOT"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "rig" / "runs"


def check_runs_root(runs_root: Path) -> None:
    """Refuse a runs root inside a git repository or below an AGENTS.md/CLAUDE.md.

    Harnesses read context files from every ancestor directory (Pi up to `/`) and stop their
    search at a git root: either would leak another project's instructions into the run.
    """
    root = runs_root.resolve()
    for directory in (root, *root.parents):
        for name in CONTEXT_FILES:
            if (directory / name).exists():
                raise WorkspaceError(
                    f"{directory / name} would be read by the agent; move the runs root elsewhere "
                    "(set RIG_RUNS_ROOT)"
                )
        if (directory / ".git").exists():
            raise WorkspaceError(
                f"runs root {root} is inside the git repository {directory}; set RIG_RUNS_ROOT to a "
                "directory outside any repository"
            )


def _git(args: list[str], cwd: Path, git_dir: Path | None = None) -> str:
    prefix = ["git", *SAFE_GIT] + ([f"--git-dir={git_dir}", f"--work-tree={cwd}"] if git_dir else [])
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), **GIT_ENV}
    proc = subprocess.run([*prefix, *args], cwd=cwd, env=env, capture_output=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip().splitlines()
        raise WorkspaceError(f"git {' '.join(args)} failed in {cwd}: {(message or ['?'])[0]}")
    return proc.stdout.decode(errors="replace")


def _inside(workdir: Path, rel: str, what: str) -> Path:
    path = (workdir / rel).resolve()
    if Path(rel).is_absolute() or not path.is_relative_to(workdir.resolve()):
        raise WorkspaceError(f"{what} {rel!r} leaves the workspace; use a path relative to the fixture")
    return path


def apply_overlays(workdir: Path, remove_files: list[str], write_files: dict[str, str]) -> None:
    """Apply a condition's overlays: remove files (which must exist) and write files."""
    for rel in remove_files:
        path = _inside(workdir, rel, "remove_files entry")
        if not path.exists():
            raise WorkspaceError(
                f"remove_files entry {rel!r} does not exist in the workspace; fix the condition"
            )
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    for rel, content in write_files.items():
        path = _inside(workdir, rel, "write_files entry")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def init_baseline(workdir: Path, rig_git_dir: Path) -> str:
    """`git init` the workspace, commit the baseline, keep a private copy of the repository.

    The agent sees (and may rewrite) `workdir/.git`; the rig diffs against its own copy,
    outside the workspace, so a rewritten history or git config cannot hide a change.
    """
    # No template (hook samples) and one pack instead of a loose object per file: the private
    # copy below then costs a few files instead of a hundred.
    _git(["init", "-q", "-b", "main", "--template="], workdir)
    _git(["-c", "core.bigFileThreshold=1", "add", "-A"], workdir)
    _git(["commit", "-q", "--no-verify", "-m", "baseline"], workdir)
    commit = (workdir / ".git" / "refs" / "heads" / "main").read_text().strip()
    shutil.copytree(workdir / ".git", rig_git_dir, symlinks=True)
    return commit


def collect_diff(workdir: Path, rig_git_dir: Path, baseline: str) -> tuple[str, list[str]]:
    """(binary diff against the baseline, changed paths with their status letter)."""
    _git(["add", "-A"], workdir, rig_git_dir)
    flags = ["--binary", "--no-ext-diff", "--no-textconv", "--no-renames", "--patch-with-raw"]
    out = _git(["diff", "--cached", *flags, baseline], workdir, rig_git_dir)
    # Raw lines (":old new sha sha S<TAB>path") come first, then a blank line, then the patch.
    raw, _, diff = out.partition("\n\n") if out.startswith(":") else ("", "", out)
    changed = []
    for line in raw.splitlines():
        meta, _, path = line.partition("\t")
        changed.append(f"{meta.split()[-1]} {path}")
    return diff, changed

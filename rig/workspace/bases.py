"""A task's starting tree when it is not the pack's fixture: a base, pinned by its git tree hash.

`rig task mine` makes a task at its fix's parent when the fix's reverse does not apply to the
snapshot. That parent's tree (the fixture with the repository's files as they were at the parent)
is a base: the pack keeps every base its tasks need in one git bundle, `bases/bases.bundle`, one
parentless commit per base under `refs/bases/<tree>`; git stores the files the bases share once.
Each machine writes a base out once, into `$RIG_BASES_DIR` (default ~/.cache/rig/bases/<tree>),
from a bare repository there that the bundles are fetched into; a folder there is complete once
it has its name (it is renamed into place). Git checks every object it fetches against its hash,
so the tree hash in task.toml pins the base's bytes.

Files are written from git's objects, never checked out: no attributes, filters or hooks apply.
"""

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from filelock import FileLock

from rig.workspace.build import GIT_TIMEOUT_S, WorkspaceError, git_bytes, git_env

BASES_DIR = "bases"
BUNDLE = "bases.bundle"
REF_PREFIX = "refs/bases/"
BASES_DIR_VAR = "RIG_BASES_DIR"
STORE = "objects.git"
EXECUTABLE_MODE = "100755"
SYMLINK_MODE = "120000"


def bases_root() -> Path:
    """Where bases are written out: `$RIG_BASES_DIR`, default ~/.cache/rig/bases."""
    configured = os.environ.get(BASES_DIR_VAR)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "rig" / BASES_DIR


def bundle_path(pack_root: Path) -> Path:
    """The pack's bundle of bases."""
    return pack_root / BASES_DIR / BUNDLE


def write_tree(
    git: list[str], treeish: str, dest: Path, env: dict[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """Write the files of `treeish` into `dest`, read from git's objects with the command `git`
    (`["git", "-C", repo]`, say); the files written and the submodules left out (their commits
    live elsewhere). WorkspaceError with git's complaint when it cannot be read."""
    listing = _run([*git, "ls-tree", "-r", "-z", "--full-tree", treeish], env)
    blobs: list[tuple[str, str, str]] = []
    submodules: list[str] = []
    for entry in filter(None, listing.decode(errors="surrogateescape").split("\0")):
        meta, path = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "commit":
            submodules.append(path)
        else:
            blobs.append((mode, sha, path))
    # One git process streams every object: a request, then its answer, so no pipe fills up.
    with subprocess.Popen(
        [*git, "cat-file", "--batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    ) as cat:
        assert cat.stdin is not None and cat.stdout is not None
        for mode, sha, path in blobs:
            cat.stdin.write(sha.encode() + b"\n")
            cat.stdin.flush()
            header = cat.stdout.readline().split()
            if len(header) != 3 or header[1] != b"blob":
                raise WorkspaceError(f"git cannot read {path} of {treeish}; run git fsck")
            content = cat.stdout.read(int(header[2]))
            cat.stdout.read(1)  # the newline after each object
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if mode == SYMLINK_MODE:
                target.symlink_to(os.fsdecode(content))
            else:
                target.write_bytes(content)
                if mode == EXECUTABLE_MODE:
                    target.chmod(target.stat().st_mode | 0o111)
    return [path for _, _, path in blobs], submodules


def _run(cmd: list[str], env: dict[str, str] | None) -> bytes:
    try:
        proc = subprocess.run(
            cmd, capture_output=True, stdin=subprocess.DEVNULL, env=env, timeout=GIT_TIMEOUT_S
        )
    except FileNotFoundError:
        raise WorkspaceError("git is not installed; install git, then rerun") from None
    except subprocess.TimeoutExpired:
        raise WorkspaceError(f"git {cmd[-3] if len(cmd) > 2 else ''} took over {GIT_TIMEOUT_S:g}s") from None
    if proc.returncode != 0:
        first = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[0]
        raise WorkspaceError(f"git {' '.join(cmd[-2:])} failed ({first})")
    return proc.stdout


def _store() -> Path:
    """The machine's bare repository of bases; made on first use. Call with the lock held."""
    store = bases_root() / STORE
    if not (store / "HEAD").is_file():
        store.mkdir(parents=True, exist_ok=True)
        git_bytes(["init", "-q", "--bare", "--template=", str(store)], store.parent)
    return store


def _lock() -> FileLock:
    root = bases_root()
    root.mkdir(parents=True, exist_ok=True)
    return FileLock(root / ".lock")


def _has(store: Path, tree: str) -> bool:
    try:
        return git_bytes(["cat-file", "-t", tree], store, store).strip() == b"tree"
    except WorkspaceError:
        return False


def _fetch_bundle(store: Path, pack_root: Path) -> None:
    bundle = bundle_path(pack_root)
    if bundle.is_file():
        git_bytes(
            ["fetch", "-q", "--no-tags", str(bundle.resolve()), f"+{REF_PREFIX}*:{REF_PREFIX}*"], store, store
        )


def materialize(pack_root: Path, tree: str) -> Path:
    """The base `tree` of the pack at `pack_root`, written out on this machine (once); WorkspaceError
    naming the fix when neither this machine nor the pack's bundle has it."""
    dest = bases_root() / tree
    if dest.is_dir():
        return dest
    with _lock():
        if dest.is_dir():
            return dest
        store = _store()
        if not _has(store, tree):
            _fetch_bundle(store, pack_root)
        if not _has(store, tree):
            raise WorkspaceError(
                f"base {tree[:12]} is not in {bundle_path(pack_root)}; mine the task again (rig task mine)"
            )
        partial = dest.with_name(f".{tree}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        write_tree(["git", f"--git-dir={store}"], tree, partial, env=git_env(store))
        partial.rename(dest)
    return dest


def keep(work: Path) -> str:
    """Keep the tree of the git work copy `work`'s HEAD as a base on this machine; its tree hash."""
    tree = git_bytes(["rev-parse", "HEAD^{tree}"], work).decode().strip()
    # Parentless: a base carries no history, so the bundle holds the trees its tasks need only.
    commit = git_bytes(["commit-tree", tree, "-m", f"base {tree}"], work).decode().strip()
    with _lock():
        store = _store()
        if not _has(store, tree):
            git_bytes(["push", "-q", "--no-verify", str(store), f"{commit}:{REF_PREFIX}{tree}"], work)
    return tree


def bundle(pack_root: Path, trees: Iterable[str]) -> None:
    """Write the pack's bundle with the bases `trees` (those it had are fetched first), replacing
    the old one in one step."""
    wanted = sorted(set(trees))
    if not wanted:
        return
    target = bundle_path(pack_root)
    with _lock():
        store = _store()
        _fetch_bundle(store, pack_root)
        missing = [tree for tree in wanted if not _has(store, tree)]
        if missing:
            raise WorkspaceError(
                f"base {missing[0][:12]} is on no bundle nor this machine; mine the task again"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{BUNDLE}.partial")
        git_bytes(
            ["bundle", "create", "-q", str(partial), *(f"{REF_PREFIX}{tree}" for tree in wanted)],
            store,
            store,
        )
        partial.replace(target)

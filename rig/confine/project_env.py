"""A built project environment as every process that runs the project's code gets it.

The environment (rig/env/ builds it once, into a cache) is a virtualenv that holds the project's
dependencies and the metadata of its editable install, never its sources or tests (rig.env.seal:
every agent can read the environment). A run's tree brings its own sources: the tree's source
roots go first on the module path, so the agent's `python`, the gate and the hidden tests import
the code in that tree. Nothing is copied per run.

One function here (`ProjectEnv.agent_environ`) gives every adapter's agent the same PATH and
variables; `verify_environ` does it for the gate and the hidden tests. `fingerprint` is what the
rig compares after each run: an agent without a sandbox can write into the environment.
"""

import hashlib
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rig.confine.untrusted import remove

# In each tree's node_modules: where the files that tools write into their own installed package
# go instead (rig.env.node.SELF_WRITES links them here, through /proc/self/cwd).
TREE_WRITES = ".rig-writes"
# How many entries a fingerprint reads at most: more and the environment counts as changed (an
# agent that filled it must not make the rig walk forever).
FINGERPRINT_MAX_ENTRIES = 500_000


class EnvironmentChanged(Exception):
    """The environment no longer is what was built: something wrote into it."""


@dataclass(frozen=True)
class ProjectEnv:
    """A complete project environment and what a tree needs to use it."""

    root: Path
    """The virtualenv (or the node environment's folder), read-only to every agent under bubblewrap."""
    hash: str
    """Its identity (rig/env/identity.py), pinned in every record."""
    packages_digest: str
    """sha256 of its installed package list, pinned in every record."""
    base_prefix: Path
    """The interpreter installation it was made from, which a sandbox must show too."""
    source_roots: tuple[str, ...]
    """Where a tree's importable packages live, relative to the tree ("" is its root)."""
    variables: Mapping[str, str] = field(default_factory=dict)
    """The pack's `env`, the pretend-version variables and what the package manager needs (yarn 2+'s)."""
    build: tuple[str, ...] = ()
    """The pack's `build` lines, run on every tree before it is used."""
    generated: Path | None = None
    """A folder of files the project's install generated (a version file), mirrored as in a tree."""
    plugins: tuple[str, ...] = ()
    """The pytest plugin modules its distributions register, loaded by name (autoload stays off)."""
    state: str = ""
    """The fingerprint taken when it was activated: a run that changes it fails."""
    activated_at: float = 0.0
    """When that fingerprint was taken (time.time()): what changed since is named."""
    python_version: str = ""
    """Its interpreter's version, pinned in every record."""
    packages: tuple[str, ...] = ()
    """Its installed distributions as `uv pip freeze` lists them (`name==version`); a node
    environment's top packages."""
    node_modules: Path | None = None
    """A node environment's node_modules (None: a Python environment): every tree gets a
    node_modules folder of links to its entries, and its `.bin` goes first on PATH."""
    tools: tuple[Path, ...] = ()
    """`node_modules/.bin` folders on PATH after `bin`, their installs shown read-only in a
    sandbox: the package manager rig installed for it (pnpm, yarn)."""
    module_folders: tuple[str, ...] = ("",)
    """The folders of a node environment's project copy that hold a node_modules, relative to it:
    "" (its root), and a workspace's packages that have their own (a monorepo's)."""

    def version(self, distribution: str) -> str | None:
        """The installed version of `distribution` (pinned names: ruff, pytest), or None."""
        wanted = distribution.lower().replace("_", "-")
        for line in self.packages:
            name, sep, version = line.partition("==")
            if sep and name.strip().lower().replace("_", "-") == wanted:
                return version.strip()
        return None

    @property
    def bin(self) -> Path:
        """The environment's scripts: python, pytest and the project's tools (node_modules/.bin)."""
        if self.node_modules is not None:
            return self.node_modules / ".bin"
        return self.root / "bin"

    @property
    def python(self) -> str:
        """The environment's interpreter, `{python}` in a pack's commands (a node environment
        has none: the rig's own)."""
        if self.node_modules is not None:
            return sys.executable
        return str(self.bin / "python")

    def link_modules(self, tree: Path) -> None:
        """Give `tree` a node_modules folder of links to the environment's entries, replacing
        whatever is there: what node resolves from the tree is the environment's, while a tool
        that writes into node_modules (vite's cache) writes into the tree's own folder, as does one
        that writes into its own package (TREE_WRITES). A monorepo's packages get theirs too, and a
        link to one of its packages leads to the tree's copy, where the agent's edits are."""
        if self.node_modules is None:
            return
        project = self.node_modules.parent
        for folder in self.module_folders:
            if not _plain_folder(tree, folder):
                continue
            dest = tree / folder / "node_modules"
            remove(dest)
            dest.mkdir()
            if not folder:
                (dest / TREE_WRITES).mkdir()
            _link_entries(project / folder / "node_modules", dest, project, tree)

    def visible(self) -> list[Path]:
        """What a sandbox must show read-only for the environment to run."""
        # A tool's folder is <its install>/node_modules/.bin, whose links point into the install.
        return [self.root, self.base_prefix, *(tool.parent.parent for tool in self.tools)]

    def roots_in(self, tree: Path) -> list[str]:
        """The tree's source roots as absolute paths, first on the module path."""
        return [str(tree / root) if root else str(tree) for root in self.source_roots]

    def agent_environ(self, env: dict[str, str], tree: Path) -> dict[str, str]:
        """An agent's explicit environment `env` with the project environment in it: its bin first
        on PATH (the rig's own interpreter taken off), VIRTUAL_ENV, the tree's source roots on
        PYTHONPATH, the pack's variables."""
        own = str(Path(sys.executable).parent)
        rest = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != own]
        out = {
            **env,
            **self.variables,
            "PATH": os.pathsep.join([str(self.bin), *map(str, self.tools), *rest]),
        }
        if self.node_modules is None:
            out |= {"VIRTUAL_ENV": str(self.root), "PYTHONPATH": os.pathsep.join(self.roots_in(tree))}
        return out

    def verify_environ(self, env: dict[str, str], tree: Path, path_roots: bool) -> dict[str, str]:
        """A verification's scrubbed environment `env` with the project environment in it; the
        tree's source roots on PYTHONPATH only if `path_roots` (the gate: a command of the pack's);
        the hidden tests' boot puts them on the path itself, after pytest is imported."""
        path = [str(self.bin), *map(str, self.tools), env.get("PATH", "")]
        out = {**env, **self.variables, "PATH": os.pathsep.join(path)}
        if self.node_modules is not None:
            return out
        out["VIRTUAL_ENV"] = str(self.root)
        if path_roots:
            out["PYTHONPATH"] = os.pathsep.join(self.roots_in(tree))
        if self.plugins:
            out["PYTEST_PLUGINS"] = ",".join(self.plugins)
        return out

    def check_unchanged(self) -> None:
        """Raise EnvironmentChanged if the environment's fingerprint is not the one it was activated with."""
        now = fingerprint(self.root)
        if now != self.state:
            written = written_since(self.root, self.activated_at)
            named = f": {', '.join(written)}" if written else ""
            raise EnvironmentChanged(
                f"the project environment {self.root} changed during the run (a file in it was written, "
                f"added or removed{named})"
            )


def _plain_folder(tree: Path, folder: str) -> bool:
    """Whether `folder` (relative) is a folder of `tree` reached through folders alone: the tree
    may be the agent's, where a link would lead the node_modules written there elsewhere."""
    path = tree
    for part in Path(folder).parts:
        path = path / part
        try:
            if not stat.S_ISDIR(path.lstat().st_mode):
                return False
        except OSError:
            return False
    return True


def _link_entries(source: Path, dest: Path, project: Path, tree: Path) -> None:
    """Link each entry of the environment's node_modules folder `source` into `dest`, a scope
    folder (`@org`) entry by entry. A link of the environment's that leads into its project copy
    outside any node_modules (a workspace package) leads to the same place in `tree` instead."""
    for entry in sorted(os.scandir(source), key=lambda e: e.name):
        if entry.name.startswith("@") and entry.is_dir(follow_symlinks=False):
            (dest / entry.name).mkdir()
            _link_entries(Path(entry.path), dest / entry.name, project, tree)
            continue
        target = entry.path
        if entry.is_symlink():
            real = Path(os.path.realpath(entry.path))
            if real.is_relative_to(project) and "node_modules" not in real.relative_to(project).parts:
                target = str(tree / real.relative_to(project))
        os.symlink(target, dest / entry.name)


def written_since(root: Path, since: float, limit: int = 3) -> list[str]:
    """Up to `limit` files under `root` (a built environment, rig's own) changed after `since` (a
    time.time()), relative to it: what a command wrote into the environment. Links not followed;
    bounded in entries as the fingerprint is."""
    found: list[str] = []
    seen = 0
    for folder, dirs, files in os.walk(root):
        seen += len(dirs)
        for name in files:
            seen += 1
            path = Path(folder, name)
            try:
                changed = path.lstat().st_mtime > since
            except OSError:
                continue
            if changed:
                found.append(path.relative_to(root).as_posix())
                if len(found) >= limit:
                    return found
        if seen > FINGERPRINT_MAX_ENTRIES:
            break
    return found


def fingerprint(root: Path) -> str:
    """sha256 over every entry's path, type, mode, size and mtime under `root`, links not followed.

    Stat only, never the bytes: cheap enough to take after every run. Bounded in entries.
    """
    digest = hashlib.sha256()
    pending = [root]
    seen = 0
    while pending:
        folder = pending.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            digest.update(f"unreadable {folder}: {exc.errno}\n".encode())
            continue
        for entry in entries:
            seen += 1
            if seen > FINGERPRINT_MAX_ENTRIES:
                return f"over {FINGERPRINT_MAX_ENTRIES} entries"
            info = entry.stat(follow_symlinks=False)
            digest.update(
                f"{entry.path}\0{info.st_mode}\0{info.st_size}\0{info.st_mtime_ns}\n".encode(
                    errors="surrogateescape"
                )
            )
            if stat.S_ISDIR(info.st_mode):
                pending.append(Path(entry.path))
    return digest.hexdigest()

"""Node environments: the fixture's lockfile installed exactly, once, into the cache.

A copy of the fixture goes into the environment (`<env>/project`, emptied afterwards of all but
what the manager installed and reads: rig.env.seal) and the package manager the pack names
installs its lockfile there (`npm ci`, `pnpm install --frozen-lockfile`, `yarn install
--frozen-lockfile` or, yarn 2+, `--immutable`; pnpm and yarn themselves installed through npm at a
pinned version). The install runs no scripts (`--ignore-scripts`, yarn 2+'s `--mode=skip-build`);
`rebuild` then runs the install scripts as a step of its own: the dependencies' (as far as the
manager's configuration allows them) and the project's own `postinstall` (pnpm's runs its
`prepare` too). Every tree then gets a `node_modules/` folder of links into the environment's
(rig.confine.project_env), so a tool that writes its cache into node_modules (vite, vitest)
writes it into the tree, never into the environment; yarn 2+ always installs with its
node-modules linker for that reason (Plug'n'Play resolves from its own `.pnp.cjs`, not links).
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from semantic_version import NpmSpec, Version

from rig.confine.network import Egress
from rig.confine.project_env import TREE_WRITES
from rig.env.seal import seal
from rig.env.uvtool import EnvError, run_step
from rig.schema import EnvironmentSpec

# In the cache, beside the environments: the package managers rig installs (pnpm, yarn).
TOOLS_DIR = ".tools"
LOCKFILES = {
    "npm": ("package-lock.json", "npm-shrinkwrap.json"),
    "pnpm": ("pnpm-lock.yaml",),
    "yarn": ("yarn.lock",),
}
# The managers rig installs when package.json's packageManager names none: a pnpm that reads
# lockfile format 9.0; yarn 1's last release for a `# yarn lockfile v1`, else the newest yarn 4.
PNPM_VERSION = "10.34.9"
YARN_CLASSIC_VERSION = "1.22.22"
YARN_BERRY_VERSION = "4.18.1"
# pnpm releases whose registry fetch fails on node 20 and later (ERR_INVALID_THIS, after retries of
# 10 s and a minute: pnpm/pnpm#6424), by the range they fall in, to the first release of the same
# line with the fix, which reads the same lockfile format. Measured on this machine's node 20: 6.35.1,
# 7.27.0, 7.32.0 and 8.3.0 fail; 7.33.0 and 8.3.1 install. pnpm 6 got no fix.
PNPM_FETCH_FIXED = {"<7.33.0": "7.33.0", ">=8.0.0 <8.3.1": "8.3.1"}
PNPM_FETCH_BROKEN_FROM_NODE = "20.0.0"
# yarn 2+ is published on npm as @yarnpkg/cli-dist (command `yarn`); yarn 1 as `yarn`.
YARN_BERRY_PACKAGE = "@yarnpkg/cli-dist"
# Files a tool writes into its own installed package whenever it runs, by package; `{tsconfig}`
# stands for the stem of each tsconfig*.json at the project's root. vitest's typecheck keeps tsc's
# incremental state beside its code: in dist (0.x, 4.x), dist/vendor (1.x) or dist/chunks (2.x,
# 3.x, which name it after the tsconfig). Each becomes a link, through /proc/self/cwd, to a file of
# the tree the tool runs in (its node_modules/TREE_WRITES): the environment stays as built
# (read-only in a sandbox, fingerprinted without one) and no run reads another's state.
SELF_WRITES = {
    "vitest": (
        "dist/{tsconfig}.tmp.tsbuildinfo",
        "dist/vendor/{tsconfig}.tmp.tsbuildinfo",
        "dist/chunks/{tsconfig}.tmp.tsbuildinfo",
    )
}
# What package.json says about the install (not its scripts or description).
PACKAGE_KEYS = (
    "dependencies",
    "devDependencies",
    "optionalDependencies",
    "peerDependencies",
    "bundleDependencies",
    "overrides",
    "resolutions",
    "pnpm",
    "workspaces",
    "packageManager",
    "dependenciesMeta",
    "engines",
)
# Files beside package.json that change what the manager installs or from where.
CONFIG_FILES = (".npmrc", "pnpm-workspace.yaml", ".pnpmfile.cjs", ".yarnrc.yml", ".yarnrc")
# yarn's code checked into a project (the release .yarnrc.yml's yarnPath names, which any yarn runs
# instead of itself; plugins): it runs the install, so its bytes are part of the identity.
YARN_CODE_DIRS = (".yarn/releases", ".yarn/plugins")
# The node version a project's nvm or nodenv users switch to, read when nothing else names a range.
NODE_VERSION_FILES = (".nvmrc", ".node-version")
_NOT_COPIED = ("node_modules", ".git")
_QUIET = ["--no-audit", "--no-fund", "--loglevel=error"]
_PACKAGE_MANAGER = re.compile(r"^(npm|pnpm|yarn)@(\d+\.\d+\.\d+[^+]*)")


@dataclass(frozen=True)
class Node:
    """The node an environment is made for: the machine's, checked against the range the pack asks."""

    path: str
    version: str
    prefix: str
    """Its installation (`<prefix>/bin/node`), which a sandbox shows read-only."""
    unchecked: str | None = None
    """Why its version was not checked (a version file naming an nvm alias), for the build log."""


@dataclass(frozen=True)
class Manager:
    """A package manager rig installs through npm into the cache's `.tools/` folder."""

    name: str
    """Its command: pnpm or yarn."""
    package: str
    """The npm package it is published as."""
    version: str
    replaces: str | None = None
    """The version package.json named, when it cannot run here and this one stands in for it."""

    @property
    def berry(self) -> bool:
        """Whether it is yarn 2 or later (yarn "berry"), which installs and is configured unlike yarn 1."""
        return self.name == "yarn" and not self.version.startswith("1.")


def package_json(fixture: Path) -> dict:
    """The fixture's package.json; EnvError in one line when it is missing or not JSON."""
    path = fixture / "package.json"
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise EnvError(f"environment: {path} does not exist; a node environment needs package.json") from None
    except (OSError, ValueError) as exc:
        raise EnvError(f"environment: {path} is not readable JSON ({exc}); fix the file") from None
    if not isinstance(data, dict):
        raise EnvError(f"environment: {path} is not a JSON object; fix the file")
    return data


def resolve_node(spec: EnvironmentSpec, fixture: Path) -> Node:
    """The machine's node (first on PATH), refused in one line if it misses the pack's `node`
    range or, without one, package.json's engines.node."""
    found = shutil.which("node")
    if found is None:
        raise EnvError(
            "environment: no node on PATH; install Node.js (https://nodejs.org) for a node environment"
        )
    about = subprocess.run([found, "--version"], capture_output=True, text=True, check=False, timeout=60)
    version = about.stdout.strip().removeprefix("v")
    try:
        parsed = Version(version)
    except ValueError:
        said = about.stdout.strip()
        raise EnvError(f"environment: {found} --version printed {said!r}; fix the node on PATH") from None
    unchecked = None
    named = node_range(spec, fixture)
    if named is not None:
        wanted, where = named
        try:
            fits = parsed in NpmSpec(wanted)
        except ValueError:
            if where not in NODE_VERSION_FILES:
                raise EnvError(
                    f'{where}: {wanted!r} is not an npm version range; set environment.node (e.g. ">=20")'
                ) from None
            # An nvm alias (lts/iron, node) names whichever release is current: only the network knows.
            fits = True
            unchecked = (
                f"node: {where} names {wanted!r}, an alias rig cannot check offline; node {version} is "
                "used unchecked (set environment.node to a range to check it)"
            )
        if not fits:
            raise EnvError(
                f"environment: node {version} ({found}) does not satisfy {where} {wanted!r}; install a node "
                "that does, first on PATH, or set environment.node to a range this one satisfies"
            )
    real = Path(found).resolve()
    return Node(path=str(real), version=version, prefix=str(real.parent.parent), unchecked=unchecked)


def node_range(spec: EnvironmentSpec, fixture: Path) -> tuple[str, str] | None:
    """The node version range a project asks for and where it says so: environment.node, else
    package.json's engines.node, else the version in .nvmrc or .node-version; None without any."""
    if spec.node is not None:
        return spec.node, "environment.node"
    engines = package_json(fixture).get("engines")
    if isinstance(engines, dict) and isinstance(engines.get("node"), str):
        return engines["node"], "package.json engines.node"
    for name in NODE_VERSION_FILES:
        try:
            text = (fixture / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        # Its first line that is not blank; nvm reads what follows `#` as a comment.
        words = [line.partition("#")[0].strip() for line in text.splitlines()]
        version = next((word for word in words if word), None)
        if version is not None:
            return version, name
    return None


def node_lock(spec: EnvironmentSpec, fixture: Path) -> Path:
    """The lockfile a node environment installs: `lock`, else the manager's usual one; EnvError
    naming the fix when the fixture has none."""
    if spec.lock is not None:
        return fixture / spec.lock
    for name in LOCKFILES[spec.manager]:
        if (fixture / name).is_file():
            return fixture / name
    raise EnvError(
        f"environment: {fixture} has no {' or '.join(LOCKFILES[spec.manager])}; commit the lockfile "
        f"(`{spec.manager} install` writes it) or name it with environment.lock"
    )


def identity_parts(spec: EnvironmentSpec, fixture: Path, node: Node) -> dict:
    """What a node environment is made from, for its hash: package.json's install keys, the
    lockfile, the manager's config files and a yarn project's own yarn code, byte for byte, the
    version of the manager rig installs, and node's version."""
    manifest = package_json(fixture)
    lock = node_lock(spec, fixture)
    configs = {name: _digest(fixture / name) for name in CONFIG_FILES if (fixture / name).is_file()}
    code = {
        path.relative_to(fixture).as_posix(): _digest(path)
        for folder in (YARN_CODE_DIRS if spec.manager == "yarn" else ())
        for path in sorted((fixture / folder).rglob("*"))
        if path.is_file()
    }
    pinned = pinned_manager(spec, fixture, node)
    return {
        "package": {key: manifest[key] for key in PACKAGE_KEYS if key in manifest},
        "lock": _digest(lock),
        "configs": configs,
        "code": code,
        "node": node.version,
        "manager": f"{pinned.package}@{pinned.version}" if pinned is not None else None,
        "self_writes": self_writes(fixture),
    }


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pnpm_that_fetches(version: str, node: Node) -> str:
    """`version`, or on a node where it cannot fetch from the registry, the first release of its line
    that can (PNPM_FETCH_FIXED); EnvError in one line when its line has none."""
    try:
        parsed = Version(version)
        broken = Version(node.version) >= Version(PNPM_FETCH_BROKEN_FROM_NODE)
    except ValueError:
        return version
    for bad, fixed in PNPM_FETCH_FIXED.items():
        if not broken or parsed not in NpmSpec(bad):
            continue
        if parsed.major != Version(fixed).major:
            raise EnvError(
                f"environment: pnpm {version} cannot fetch from the registry on node {node.version} "
                f"(pnpm/pnpm#6424) and pnpm {parsed.major} got no fix; name pnpm 7.33 or later in "
                "package.json's packageManager, or use a node before 20 first on PATH"
            )
        return fixed
    return version


def pinned_manager(spec: EnvironmentSpec, fixture: Path, node: Node) -> Manager | None:
    """The package manager rig installs for a pnpm or yarn environment, at the version
    package.json's packageManager names, else rig's pin (for yarn, by the lockfile's format), on
    `node` (a pnpm that cannot fetch there is replaced by the first fixed release of its line);
    None for npm, which comes with node. EnvError in one line for a yarn.lock of no known format."""
    if spec.manager == "npm":
        return None
    named = package_json(fixture).get("packageManager")
    match = _PACKAGE_MANAGER.match(named) if isinstance(named, str) else None
    version = match.group(2) if match is not None and match.group(1) == spec.manager else None
    if spec.manager == "pnpm":
        wanted = version or PNPM_VERSION
        usable = _pnpm_that_fetches(wanted, node)
        return Manager("pnpm", "pnpm", usable, wanted if usable != wanted else None)
    version = version or _yarn_for(node_lock(spec, fixture))
    return Manager("yarn", "yarn" if version.startswith("1.") else YARN_BERRY_PACKAGE, version)


def _yarn_for(lock: Path) -> str:
    """The yarn rig pins for a yarn.lock whose project names none: yarn 1 for its format, else yarn 4."""
    text = lock.read_text(encoding="utf-8", errors="replace")
    if re.search(r"^__metadata:", text, re.MULTILINE):
        return YARN_BERRY_VERSION
    if "# yarn lockfile v1" in text[:1000]:
        return YARN_CLASSIC_VERSION
    raise EnvError(
        f"environment: {lock} is no yarn lockfile (neither `# yarn lockfile v1` nor `__metadata:`); "
        'commit the one `yarn install` writes, or name the yarn in package.json ("packageManager": '
        '"yarn@4.18.1")'
    )


def _install_manager(
    pinned: Manager, root: Path, log: Path, environ: dict[str, str], egress: Egress | None
) -> str:
    """The `pinned` manager's command, installed through npm once into `<root>/.tools/<name>-<version>`."""
    tools = root / TOOLS_DIR
    tools.mkdir(exist_ok=True)
    name = f"{pinned.name}-{pinned.version}"
    folder = tools / name
    binary = folder / "node_modules" / ".bin" / pinned.name
    with FileLock(tools / f"{name}.lock"):
        if not binary.exists():
            partial = tools / f".{name}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            package = f"{pinned.package}@{pinned.version}"
            cmd = ["npm", "install", "--prefix", str(partial), "--no-save", *_QUIET, package]
            run_step(f"install {pinned.name}", cmd, log, partial, environ, egress=egress)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(partial, folder)
    return str(binary)


def _check_runs_on(pinned: Manager, command: Path, node: Node) -> None:
    """EnvError in one line when the installed `pinned` manager (its `command`) names in its own
    engines.node a range the machine's `node` misses: pnpm 11 needs node 22, and would fail on an
    older one with a stack trace instead."""
    try:
        manifest = json.loads((command.parent.parent / pinned.package / "package.json").read_bytes())
    except (OSError, ValueError):
        return
    engines = manifest.get("engines") if isinstance(manifest, dict) else None
    wanted = engines.get("node") if isinstance(engines, dict) else None
    if not isinstance(wanted, str):
        return
    try:
        fits = Version(node.version) in NpmSpec(wanted)
    except ValueError:
        return
    if not fits:
        raise EnvError(
            f"environment: {pinned.name} {pinned.version} needs node {wanted!r} (its engines.node) and this "
            f"machine's node is {node.version}; install a node that satisfies it, first on PATH, or name a "
            f"{pinned.name} that runs on node {node.version} in package.json's packageManager"
        )


def yarn_variables(copy: Path) -> dict[str, str]:
    """What yarn 2+ needs, to install and for every command after (the agent's `yarn test`): the
    node-modules linker, and the install's state kept in the environment (`yarn run` refuses a
    project it has no state for, and would write one into the tree); no telemetry."""
    return {
        "YARN_NODE_LINKER": "node-modules",
        "YARN_INSTALL_STATE_PATH": str(copy / ".yarn" / "install-state.gz"),
        "YARN_ENABLE_TELEMETRY": "0",
    }


@dataclass(frozen=True)
class Installed:
    """What the users of an installed node environment need besides its node_modules/.bin."""

    tools: list[str]
    """Folders on PATH after it: the package manager rig installed (pnpm's, yarn's)."""
    variables: dict[str, str]
    """Variables its manager needs in every command (yarn 2+'s linker and install state)."""


def install(
    spec: EnvironmentSpec,
    fixture: Path,
    copy: Path,
    node: Node,
    log: Path,
    environ: dict[str, str],
    egress: Egress | None,
) -> Installed:
    """Install the fixture's lockfile into a `copy` of it (its node_modules), then the pack's
    setup lines; pnpm or yarn itself goes into the cache beside the environment."""
    node_lock(spec, fixture)
    pinned = pinned_manager(spec, fixture, node)
    shutil.copytree(fixture, copy, symlinks=True, ignore=shutil.ignore_patterns(*_NOT_COPIED))
    environ = {**environ, "PATH": os.pathsep.join([str(Path(node.path).parent), environ.get("PATH", "")])}
    made = Installed([], {})
    if pinned is None:
        run_step("npm ci", ["npm", "ci", "--ignore-scripts", *_QUIET], log, copy, environ, egress=egress)
        run_step("npm rebuild", ["npm", "rebuild", *_QUIET], log, copy, environ, egress=egress)
    else:
        if pinned.replaces is not None:
            with log.open("a", encoding="utf-8") as out:
                out.write(
                    f"pnpm {pinned.replaces} (package.json's packageManager) cannot fetch from the registry "
                    f"on node {node.version} (pnpm/pnpm#6424): installing with pnpm {pinned.version}, the "
                    "first release of its line with the fix\n"
                )
        command = _install_manager(pinned, copy.parent.parent, log, environ, egress)
        _check_runs_on(pinned, Path(command), node)
        made = Installed([str(Path(command).parent)], yarn_variables(copy) if pinned.berry else {})
        environ = {**environ, **made.variables}
        if pinned.name == "pnpm":
            cmd = [command, "install", "--frozen-lockfile", "--ignore-scripts", "--reporter=append-only"]
            run_step("pnpm install", cmd, log, copy, environ, egress=egress)
            cmd = [command, "rebuild", "--reporter=append-only"]
            run_step("pnpm rebuild", cmd, log, copy, environ, egress=egress)
        elif pinned.berry:
            cmd = [command, "install", "--immutable", "--mode=skip-build"]
            run_step("yarn install", cmd, log, copy, environ, egress=egress)
            run_step("yarn rebuild", [command, "rebuild"], log, copy, environ, egress=egress)
        else:
            cmd = [
                command,
                "install",
                "--frozen-lockfile",
                "--ignore-scripts",
                "--non-interactive",
                "--no-progress",
            ]
            run_step("yarn install", cmd, log, copy, environ, egress=egress)
            # yarn 1 has no rebuild of its own; npm's runs the dependencies' install scripts.
            run_step("npm rebuild", ["npm", "rebuild", *_QUIET], log, copy, environ, egress=egress)
    setup_environ = {
        **environ,
        **spec.env,
        "PATH": os.pathsep.join([str(copy / "node_modules" / ".bin"), *made.tools, environ["PATH"]]),
    }
    for line in spec.setup:
        run_step("setup", ["sh", "-c", line], log, copy, setup_environ, egress=egress)
    redirected = redirect_self_writes(copy / "node_modules", self_writes(copy))
    with log.open("a", encoding="utf-8") as out:
        out.write(
            f"files tools write into their own package, linked into each tree: {redirected or 'none'}\n"
        )
    seal(copy, log, _install_file)
    return made


def _install_file(rel: Path) -> bool:
    """Whether an environment keeps the path `rel` of its project copy: what the package manager
    installed and reads again (node_modules, package.json, the lockfiles, its configuration, yarn's
    state and code), never the project's sources or tests."""
    lockfiles = {name for names in LOCKFILES.values() for name in names}
    return rel.name in {
        "node_modules",
        ".yarn",
        "package.json",
        *lockfiles,
        *CONFIG_FILES,
        *NODE_VERSION_FILES,
    }


def self_writes(project: Path) -> dict[str, list[str]]:
    """SELF_WRITES for the project at `project`: each package's files, `{tsconfig}` filled in."""
    stems = {"tsconfig"} | {path.stem for path in project.glob("tsconfig*.json")}
    return {
        name: sorted({file.format(tsconfig=stem) for file in files for stem in stems})
        for name, files in SELF_WRITES.items()
    }


def redirect_self_writes(modules: Path, writes: dict[str, list[str]]) -> list[str]:
    """Replace each of the `writes` (self_writes) of every installed copy of its package under
    `modules` by a link into the working folder's node_modules/TREE_WRITES; the links made,
    relative to `modules`."""
    made = []
    for name, files in writes.items():
        for package in _copies(modules, name):
            version = _version(package)
            for file in files:
                path = package / file
                if not path.parent.is_dir():
                    continue
                path.unlink(missing_ok=True)
                own = f"{name.replace('/', '+')}@{version}.{file.replace('/', '.')}"
                path.symlink_to(f"/proc/self/cwd/node_modules/{TREE_WRITES}/{own}")
                made.append(path.relative_to(modules).as_posix())
    return sorted(made)


def _copies(modules: Path, name: str) -> list[Path]:
    """Every installed copy of package `name` under `modules` (a node_modules): npm's and yarn's
    nested node_modules folders and pnpm's .pnpm store, links not followed."""
    found = []
    pending = [modules]
    while pending:
        folder = pending.pop()
        packages = []
        for entry in _folders(folder):
            if entry.name == ".pnpm":
                pending += [store / "node_modules" for store in _folders(entry)]
            elif entry.name.startswith("@"):
                packages += _folders(entry)
            elif entry.name != ".bin":
                packages.append(entry)
        for package in packages:
            if package.relative_to(folder).as_posix() == name:
                found.append(package)
            pending.append(package / "node_modules")
    return found


def _folders(folder: Path) -> list[Path]:
    """The folders in `folder`, links not followed; none when it is no folder."""
    try:
        return [Path(e.path) for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def module_folders(project: Path, limit: int = 100_000) -> tuple[str, ...]:
    """The folders of an installed `project` copy that hold a node_modules, relative to it, its
    root ("") first: a monorepo's packages. node_modules and .git are not entered; at most `limit`
    folders are looked at."""
    found = [""]
    pending = [project]
    seen = 0
    while pending and seen < limit:
        folder = pending.pop()
        for entry in _folders(folder):
            seen += 1
            if entry.name == "node_modules" and folder != project:
                found.append(folder.relative_to(project).as_posix())
            elif entry.name not in ("node_modules", ".git"):
                pending.append(entry)
    return (found[0], *sorted(found[1:]))


def _version(package: Path) -> str:
    """A package folder's version, from its package.json ("" when it names none)."""
    try:
        manifest = json.loads((package / "package.json").read_bytes())
    except (OSError, ValueError):
        return ""
    version = manifest.get("version") if isinstance(manifest, dict) else None
    return version if isinstance(version, str) else ""


def installed(modules: Path) -> list[str]:
    """The packages at the top of an environment's `modules` (node_modules), `name==version`, sorted."""
    found = []
    folders = []
    for entry in sorted(modules.iterdir()) if modules.is_dir() else []:
        if entry.name.startswith("@") and entry.is_dir():
            folders += sorted(entry.iterdir())
        elif not entry.name.startswith("."):
            folders.append(entry)
    for folder in folders:
        try:
            manifest = json.loads((folder / "package.json").read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(manifest, dict) and isinstance(manifest.get("version"), str):
            found.append(f"{manifest.get('name') or folder.name}=={manifest['version']}")
    return sorted(found)

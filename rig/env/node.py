"""Node environments: the fixture's lockfile installed exactly, once, into the cache.

A copy of the fixture goes into the environment (`<env>/project`) and the package manager the
pack names installs its lockfile there (`npm ci`, `pnpm install --frozen-lockfile`, pnpm itself
installed through npm at a pinned version). Install scripts run for the dependencies only
(`--ignore-scripts`, then `rebuild`): the project's own `prepare` (husky, a build) would need its
history or a tree. Every tree then gets a `node_modules/` folder of links into the environment's
(rig.confine.project_env), so a tool that writes its cache into node_modules (vite, vitest)
writes it into the tree, never into the environment.
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
from rig.env.uvtool import EnvError, run_step
from rig.schema import EnvironmentSpec

# In the cache, beside the environments: the package managers rig installs (pnpm).
TOOLS_DIR = ".tools"
LOCKFILES = {"npm": ("package-lock.json", "npm-shrinkwrap.json"), "pnpm": ("pnpm-lock.yaml",)}
# pnpm when package.json's packageManager names none: a release that reads lockfile format 9.0.
PNPM_VERSION = "10.34.9"
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
    "engines",
)
# Files beside package.json that change what the manager installs or from where.
CONFIG_FILES = (".npmrc", "pnpm-workspace.yaml", ".pnpmfile.cjs")
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
    wanted, where = spec.node, "environment.node"
    engines = package_json(fixture).get("engines")
    if wanted is None and isinstance(engines, dict) and isinstance(engines.get("node"), str):
        wanted, where = engines["node"], "package.json engines.node"
    if wanted is not None:
        try:
            fits = parsed in NpmSpec(wanted)
        except ValueError:
            raise EnvError(
                f'{where}: {wanted!r} is not an npm version range; set environment.node (e.g. ">=20")'
            ) from None
        if not fits:
            raise EnvError(
                f"environment: node {version} ({found}) does not satisfy {where} {wanted!r}; install a node "
                "that does, first on PATH, or set environment.node to a range this one satisfies"
            )
    real = Path(found).resolve()
    return Node(path=str(real), version=version, prefix=str(real.parent.parent))


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
    lockfile and the manager's config files, byte for byte, and node's version."""
    manifest = package_json(fixture)
    lock = node_lock(spec, fixture)
    configs = {
        name: hashlib.sha256((fixture / name).read_bytes()).hexdigest()
        for name in CONFIG_FILES
        if (fixture / name).is_file()
    }
    return {
        "package": {key: manifest[key] for key in PACKAGE_KEYS if key in manifest},
        "lock": hashlib.sha256(lock.read_bytes()).hexdigest(),
        "configs": configs,
        "node": node.version,
        "pnpm": pnpm_version(fixture) if spec.manager == "pnpm" else None,
    }


def pnpm_version(fixture: Path) -> str:
    """The pnpm that installs a project: the one package.json's packageManager names, else PNPM_VERSION."""
    named = package_json(fixture).get("packageManager")
    match = _PACKAGE_MANAGER.match(named) if isinstance(named, str) else None
    if match is not None and match.group(1) == "pnpm":
        return match.group(2)
    return PNPM_VERSION


def _pnpm(root: Path, version: str, log: Path, environ: dict[str, str], egress: Egress | None) -> str:
    """pnpm `version`, installed through npm once into `<cache>/.tools/pnpm-<version>`."""
    tools = root / TOOLS_DIR
    tools.mkdir(exist_ok=True)
    folder = tools / f"pnpm-{version}"
    binary = folder / "node_modules" / ".bin" / "pnpm"
    with FileLock(tools / f"pnpm-{version}.lock"):
        if not binary.exists():
            partial = tools / f".pnpm-{version}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            cmd = ["npm", "install", "--prefix", str(partial), "--no-save", *_QUIET, f"pnpm@{version}"]
            run_step("install pnpm", cmd, log, partial, environ, egress=egress)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(partial, folder)
    return str(binary)


def install(
    spec: EnvironmentSpec,
    fixture: Path,
    copy: Path,
    node: Node,
    log: Path,
    environ: dict[str, str],
    egress: Egress | None,
) -> list[str]:
    """Install the fixture's lockfile into a `copy` of it (its node_modules), then the pack's
    setup lines; pnpm itself goes into the cache beside the environment. The folders the
    environment's users need on PATH besides its node_modules/.bin (pnpm's)."""
    node_lock(spec, fixture)
    shutil.copytree(fixture, copy, symlinks=True, ignore=shutil.ignore_patterns(*_NOT_COPIED))
    tools: list[str] = []
    environ = {**environ, "PATH": os.pathsep.join([str(Path(node.path).parent), environ.get("PATH", "")])}
    if spec.manager == "npm":
        run_step("npm ci", ["npm", "ci", "--ignore-scripts", *_QUIET], log, copy, environ, egress=egress)
        run_step("npm rebuild", ["npm", "rebuild", *_QUIET], log, copy, environ, egress=egress)
    else:
        pnpm = _pnpm(copy.parent.parent, pnpm_version(fixture), log, environ, egress)
        tools.append(str(Path(pnpm).parent))
        cmd = [pnpm, "install", "--frozen-lockfile", "--ignore-scripts", "--reporter=append-only"]
        run_step("pnpm install", cmd, log, copy, environ, egress=egress)
        run_step(
            "pnpm rebuild", [pnpm, "rebuild", "--reporter=append-only"], log, copy, environ, egress=egress
        )
    modules = copy / "node_modules"
    setup_environ = {
        **environ,
        **spec.env,
        "PATH": os.pathsep.join([str(modules / ".bin"), *tools, environ["PATH"]]),
    }
    for line in spec.setup:
        run_step("setup", ["sh", "-c", line], log, copy, setup_environ, egress=egress)
    return tools


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

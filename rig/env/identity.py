"""Which environment a pack needs: the interpreter its constraint resolves to, and the hash of
everything the environment is made from (never the project's sources, which each run brings)."""

import hashlib
import json
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.env.node import Node, identity_parts, node_lock
from rig.env.uvtool import EnvError, uv_bin
from rig.schema import BASES_DIR, EnvironmentSpec, Pack

GENERATED_LOCK = "environment.lock.txt"
LOCK_HEADER = "# rig environment lock; inputs sha256:"
# What a build makes besides the install (its manifest's fields, the generated files): a build
# of another format is another environment.
BUILD_FORMAT = 4
# The first format whose environments hold no copy of the project's sources (rig.env.seal): one
# of an earlier format still in the cache is rebuilt, and the build says why.
SEALED_FORMAT = 4
# The tables of pyproject.toml that say what gets installed; the rest (tool settings, the
# description) changes no environment.
PROJECT_KEYS = ("dependencies", "optional-dependencies", "requires-python")
TOP_TABLES = ("dependency-groups", "build-system")
# A project's dependencies declared outside pyproject.toml (python-slugify's install_requires).
SETUP_SCRIPTS = ("setup.py", "setup.cfg")
_ABOUT = (
    "import json, sys, sysconfig; print(json.dumps({'version': '.'.join(map(str, sys.version_info[:3])),"
    " 'platform': f'{sys.implementation.name}-{sysconfig.get_platform()}'}))"
)


@dataclass(frozen=True)
class Interpreter:
    """The interpreter an environment is made from."""

    path: str
    version: str
    platform: str


def resolve_interpreter(spec: EnvironmentSpec) -> Interpreter:
    """The interpreter `spec.python` names on this machine: rig's own without a constraint, else the
    one `uv python find` picks (installed ones only: a build never downloads an interpreter)."""
    path = sys.executable
    if spec.python is not None:
        cmd = [uv_bin(), "python", "find", "--system", "--no-project", spec.python]
        found = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if found.returncode != 0 or not found.stdout.strip():
            raise EnvError(
                f"environment interpreter: no Python matching {spec.python!r} on this machine "
                f"(`uv python find --system {spec.python}`); install one or change environment.python"
            )
        path = found.stdout.strip()
    about = subprocess.run([path, "-c", _ABOUT], capture_output=True, text=True, check=False)
    if about.returncode != 0:
        raise EnvError(f"environment interpreter: {path} does not run; fix it or change environment.python")
    facts = json.loads(about.stdout)
    return Interpreter(path=path, version=facts["version"], platform=facts["platform"])


def declared_dependencies(spec: EnvironmentSpec, fixture: Path) -> dict[str, Any]:
    """What the fixture's files say is installed: under "pyproject", the parts of pyproject.toml
    that do (empty without one), never the whole file; under "setup", for a project whose
    dependencies setup.py or setup.cfg declare (no [project] table, or one naming them `dynamic`),
    those files' digests (setup.py is code: its `install_requires` cannot be read without running
    it). "setup" is left out otherwise, so the identity of a project without them, or with only
    tool settings in setup.cfg, is what it was. EnvError in one line for an unreadable pyproject."""
    pyproject = fixture / "pyproject.toml"
    data: dict[str, Any] | None = None
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise EnvError(f"{pyproject}: cannot read it ({exc}); fix the file") from None
    tables: dict[str, Any] = {}
    if data is not None:
        project = data.get("project", {})
        tables = {"project": {key: project[key] for key in PROJECT_KEYS if key in project}}
        tables.update({key: data[key] for key in TOP_TABLES if key in data})
    declared: dict[str, Any] = {"pyproject": tables}
    project = (data or {}).get("project")
    if spec.project and not (
        isinstance(project, dict)
        and not {"dependencies", "optional-dependencies"} & set(project.get("dynamic") or ())
    ):
        found = {
            name: _file_digest(fixture / name, name) for name in SETUP_SCRIPTS if (fixture / name).is_file()
        }
        if found:
            declared["setup"] = found
    return declared


def _file_digest(path: Path, key: str) -> str:
    if not path.is_file():
        raise EnvError(f"environment.{key}: {path} is not a file; fix the path in pack.toml")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def resolution_digest(spec: EnvironmentSpec, fixture: Path) -> str:
    """A hash of what a generated lock is resolved from: what to install and the dependency
    specification it reads. A lock resolved from other inputs no longer matches."""
    inputs = {
        "python": spec.python,
        "project": spec.project,
        "extras": sorted(spec.extras),
        "groups": sorted(spec.groups),
        "requirements": {r: _file_digest(fixture / r, "requirements") for r in spec.requirements},
        **declared_dependencies(spec, fixture),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def lock_path(pack: Pack) -> Path | None:
    """The lock the environment installs: the project's own, the generated one, or None when there
    is nothing to resolve."""
    spec = pack.spec.environment
    if spec is None:
        return None
    if spec.is_node:
        return node_lock(spec, pack.environment_dir)
    if spec.lock is not None:
        return pack.environment_dir / spec.lock
    if not (spec.project or spec.groups or spec.requirements):
        return None
    lock = pack.root / GENERATED_LOCK
    if pack.environment_dir == pack.plain.fixture_dir:
        return lock
    # A task's base whose dependencies are the fixture's shares its lock; others have their own,
    # named by what they are resolved from.
    digest = resolution_digest(spec, pack.environment_dir)
    if lock_inputs(lock) == digest:
        return lock
    return pack.root / BASES_DIR / f"{digest[:16]}.{GENERATED_LOCK}"


def lock_inputs(lock: Path) -> str | None:
    """The inputs digest a generated lock's first line names; None without one (or no lock)."""
    try:
        with lock.open(encoding="utf-8") as handle:
            first = handle.readline().rstrip("\n")
    except OSError:
        return None
    return first.removeprefix(LOCK_HEADER) if first.startswith(LOCK_HEADER) else None


def environment_hash(
    pack: Pack, interpreter: Interpreter, node: Node | None = None, build_format: int = BUILD_FORMAT
) -> str:
    """The environment's identity: the [environment] table, the dependency specification it reads,
    the requirements and lock files' bytes, the interpreter's version and the platform; for a node
    environment, what rig.env.node.identity_parts names instead of the Python parts. An earlier
    `build_format` gives the identity the same pack had under it."""
    spec = pack.spec.environment
    if spec is None:
        raise EnvError(f"{pack.root / 'pack.toml'}: no [environment]; add one (docs/environments.md)")
    if node is not None:
        parts = {
            "environment": spec.model_dump(mode="json", exclude={"build"}),
            "node": identity_parts(spec, pack.environment_dir, node),
            "platform": interpreter.platform,
            "format": build_format,
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    lock = lock_path(pack)
    parts = {
        "environment": spec.model_dump(mode="json", exclude={"build"}),
        **declared_dependencies(spec, pack.environment_dir),
        "requirements": {
            r: _file_digest(pack.environment_dir / r, "requirements") for r in spec.requirements
        },
        "lock": _file_digest(lock, "lock") if lock is not None else None,
        "python": interpreter.version,
        "platform": interpreter.platform,
        "format": build_format,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def source_roots(fixture: Path) -> tuple[str, ...]:
    """Where the project's importable packages live: `src` for a src layout (a src/ folder that is
    no package itself), else the tree's root ("")."""
    src = fixture / "src"
    if src.is_dir() and not (src / "__init__.py").exists():
        return ("src",)
    return ("",)

"""Building a pack's environment once: the lock resolved beside pack.toml, then the environment
made at its final path in the cache under a file lock, complete only once its manifest is written.

A venv is not relocatable, so it is built where it will stay (`<cache>/<hash>`); what makes it
usable is `.rig-env.json`, written last and atomically. A build that fails is removed; one killed
halfway leaves a folder without the manifest, which the next builder (holding the lock) removes.
"""

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from filelock import FileLock

from rig.confine.network import Egress
from rig.env.identity import (
    LOCK_HEADER,
    SEALED_FORMAT,
    Interpreter,
    environment_hash,
    lock_inputs,
    lock_path,
    resolution_digest,
    resolve_interpreter,
    source_roots,
)
from rig.env.network import build_network, node_endpoints
from rig.env.node import Node, resolve_node
from rig.env.node import install as install_node
from rig.env.node import installed as node_installed
from rig.env.seal import seal
from rig.env.uvtool import EnvError, base_environ, find_links, run_step, uv_bin
from rig.schema import BuiltEnvironment, EnvironmentSpec, Pack

ENV_DIR_VAR = "RIG_ENV_DIR"
MANIFEST = ".rig-env.json"
PROJECT_COPY = "project"
NODE_MODULES = "node_modules"
GENERATED_DIR = ".rig-generated"
# Where an install writes what no tree needs: metadata, build products, caches.
_NOT_GENERATED = ("__pycache__", "build", "dist", ".eggs", ".git", ".tox", ".nox", ".venv", "node_modules")
# The facts of a built environment that only its own interpreter knows.
_FACTS = (
    "import importlib.metadata as m, json, sys\n"
    "plugins = sorted({ep.value.partition(':')[0].strip() for ep in m.entry_points(group='pytest11')})\n"
    "print(json.dumps({'base_prefix': sys.base_prefix, 'plugins': plugins}))\n"
)
# Backends that derive a version from git read these; versioneer has none and falls back to 0+unknown.
PRETEND_VERSION_VARS = (
    "SETUPTOOLS_SCM_PRETEND_VERSION",
    "PDM_BUILD_SCM_VERSION",
    "POETRY_DYNAMIC_VERSIONING_BYPASS",
)


@dataclass(frozen=True)
class BuildResult:
    """A built environment: where it is, its identity, its log, and whether this call built it."""

    path: Path
    hash: str
    log: Path
    built: bool
    lock_written: Path | None
    manifest: BuiltEnvironment


def cache_root() -> Path:
    """Where environments are built: `$RIG_ENV_DIR`, default ~/.cache/rig/envs."""
    configured = os.environ.get(ENV_DIR_VAR)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "rig" / "envs"


def read_manifest(path: Path) -> BuiltEnvironment | None:
    """The manifest of a complete environment at `path`; None for a missing or half-built one."""
    try:
        return BuiltEnvironment.model_validate_json((path / MANIFEST).read_bytes())
    except (OSError, ValueError):
        return None


def _spec(pack: Pack) -> EnvironmentSpec:
    if pack.spec.environment is None:
        raise EnvError(f"{pack.root / 'pack.toml'}: no [environment]; add one (docs/environments.md)")
    return pack.spec.environment


def pretend_variables(spec: EnvironmentSpec) -> dict[str, str]:
    """The variables that make a backend deriving its version from git report the pack's version."""
    if spec.pretend_version is False:
        return {}
    version = "0.0.0" if spec.pretend_version is True else spec.pretend_version
    return dict.fromkeys(PRETEND_VERSION_VARS, version)


def _project_source(fixture: Path) -> str:
    for name in ("pyproject.toml", "setup.py", "setup.cfg"):
        if (fixture / name).is_file():
            return name
    raise EnvError(
        f"environment.project: {fixture} has no pyproject.toml, setup.py or setup.cfg; "
        "set project = false or fix the fixture"
    )


def check_lock(pack: Pack) -> None:
    """Refuse a generated lock resolved from other inputs than the pack's now."""
    spec = _spec(pack)
    if spec.is_node:
        return
    lock = lock_path(pack)
    if spec.lock is not None or lock is None or not lock.is_file():
        return
    wanted = resolution_digest(spec, pack.environment_dir)
    if lock_inputs(lock) != wanted:
        raise EnvError(
            f"environment lock: {lock} does not match the pack's dependencies (it was resolved from other "
            f"inputs than sha256:{wanted[:12]}); delete it and run `rig env build` to resolve again"
        )


def _resolve(pack: Pack, interpreter: Interpreter, root: Path) -> Path | None:
    """Write the generated lock beside pack.toml if there is none yet; the path written, or None."""
    spec = _spec(pack)
    if spec.is_node:
        return None
    lock = lock_path(pack)
    if spec.lock is not None or lock is None or lock.is_file():
        return None
    fixture = pack.environment_dir
    digest = resolution_digest(spec, fixture)
    log = root / f"resolve-{digest[:16]}.log"
    log.write_text(f"resolving {pack.name}'s environment into {lock}\n", encoding="utf-8")
    cmd = [uv_bin(), "pip", "compile", "--quiet", "--universal", "--generate-hashes", "--no-header"]
    cmd += ["--python", interpreter.path, *find_links()]
    if spec.project:
        cmd.append(_project_source(fixture))
        cmd += [arg for extra in spec.extras for arg in ("--extra", extra)]
    # Paths relative to the fixture, where uv runs: the lock's `# via` notes name no machine's folders.
    cmd += spec.requirements
    cmd += [arg for group in spec.groups for arg in ("--group", f"pyproject.toml:{group}")]
    with build_network(base_environ(), log) as egress:
        # Resolving a project reads its metadata, which a backend deriving its version from git
        # cannot make without the pretended version (a tree has no .git).
        environ = {**base_environ(), **pretend_variables(spec)}
        resolved = run_step("resolve", cmd, log, fixture, environ, capture=True, egress=egress)
    header = f"{LOCK_HEADER}{digest}\n# resolved by `uv pip compile --universal --generate-hashes`\n"
    partial = lock.with_name(f".{lock.name}.partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text(header + resolved, encoding="utf-8")
    os.replace(partial, lock)
    return lock


def _install(
    pack: Pack,
    spec: EnvironmentSpec,
    target: Path,
    interpreter: Interpreter,
    log: Path,
    egress: Egress | None,
) -> None:
    uv = uv_bin()
    environ = base_environ()
    python = str(target / "bin" / "python")
    run_step(
        "venv",
        [uv, "venv", "--quiet", "--no-project", "--python", interpreter.path, str(target)],
        log,
        target.parent,
        environ,
        egress=egress,
    )
    lock = lock_path(pack)
    if spec.lock is not None and lock is not None and lock.name == "uv.lock":
        # The project's own uv.lock: exported exactly (`--locked` refuses one that no longer matches).
        exported = target / ".rig-requirements.txt"
        cmd = [uv, "export", "--quiet", "--locked", "--format", "requirements-txt", "--no-emit-project"]
        cmd += ["--no-default-groups", "--no-header", "--project", str(lock.parent), "-o", str(exported)]
        cmd += [arg for extra in spec.extras for arg in ("--extra", extra)]
        cmd += [arg for group in spec.groups for arg in ("--group", group)]
        run_step("export lock", cmd, log, lock.parent, environ, egress=egress)
        lock = exported
    if lock is not None:
        # A hashed lock pins every dependency already. Without --no-deps, a project that its own
        # test tools depend on (pluggy, which pytest requires) is asked of the index, with no hash
        # to check it by: the lock leaves the project out, which the tree's copy provides below.
        cmd = [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            python,
            "--require-hashes",
            "--no-deps",
            *find_links(),
            "-r",
            str(lock),
        ]
        run_step("install lock", cmd, log, target, environ, egress=egress)
    if spec.project:
        # Built from a copy inside the environment: an editable install writes metadata next to the
        # sources, and the pack's fixture must stay byte-identical.
        copy = target / PROJECT_COPY
        shutil.copytree(pack.environment_dir, copy, symlinks=True)
        cmd = [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            python,
            "--no-deps",
            *find_links(),
            "-e",
            str(copy),
        ]
        run_step("install project", cmd, log, target, {**environ, **pretend_variables(spec)}, egress=egress)
    setup_environ = {
        **environ,
        **pretend_variables(spec),
        **spec.env,
        "VIRTUAL_ENV": str(target),
        "PATH": os.pathsep.join([str(target / "bin"), str(Path(uv).parent), environ.get("PATH", "")]),
    }
    links = find_links()
    if links:
        # A setup line's own `uv pip install` finds the local wheels the build itself uses.
        setup_environ["UV_FIND_LINKS"] = ",".join(filter(None, [environ.get("UV_FIND_LINKS"), links[1]]))
    for line in spec.setup:
        run_step("setup", ["sh", "-c", line], log, target, setup_environ, egress=egress)


def _generated(fixture: Path, copy: Path, roots: tuple[str, ...], into: Path) -> list[str]:
    """Copy the files the install made in the project's `copy` (under its source roots) that the
    fixture does not have `into` a mirror; their paths relative to a tree."""
    found: list[str] = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(copy / root):
            dirnames[:] = sorted(
                d for d in dirnames if d not in _NOT_GENERATED and not d.endswith((".egg-info", ".dist-info"))
            )
            for name in sorted(filenames):
                rel = Path(dirpath, name).relative_to(copy)
                if name.endswith(".pyc") or os.path.lexists(fixture / rel):
                    continue
                (into / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(copy / rel, into / rel, follow_symlinks=False)
                found.append(rel.as_posix())
    return found


def _unhook(target: Path, log: Path) -> None:
    """Take the editable install's import hooks out (its `.pth` files and finders), keeping its
    metadata: they lead to the copy the install ran in, which rig.env.seal empties. Every process
    rig runs puts the tree's own source roots on the module path instead."""
    copy = str(target / PROJECT_COPY)
    removed = []
    for site in target.glob("lib/python*/site-packages"):
        for hook in sorted(site.iterdir()):
            if not hook.is_file() or not (hook.suffix == ".pth" or hook.name.startswith("__editable__")):
                continue
            if hook.name.startswith("__editable__") or copy in hook.read_text(errors="replace"):
                hook.unlink()
                removed.append(hook.name)
    with log.open("a", encoding="utf-8") as out:
        out.write(
            f"editable import hooks removed (the trees' source roots replace them): {removed or 'none'}\n"
        )


def _facts(target: Path, log: Path) -> dict:
    """The environment's base prefix and pytest plugin modules, as its interpreter reports them."""
    cmd = [str(target / "bin" / "python"), "-c", _FACTS]
    return json.loads(run_step("facts", cmd, log, target, base_environ(), capture=True))


def installed_packages(target: Path, log: Path) -> list[str]:
    """`uv pip freeze` of the environment at `target`, its command appended to `log`."""
    cmd = [uv_bin(), "pip", "freeze", "--python", str(target / "bin" / "python")]
    return run_step("freeze", cmd, log, target, base_environ(), capture=True).splitlines()


@dataclass(frozen=True)
class Identity:
    """Which environment a pack needs now: what it is made from and its hash."""

    interpreter: Interpreter
    node: Node | None
    hash: str


def identify(pack: Pack, interpreter: Interpreter | None = None) -> Identity:
    """The interpreter (and for a node environment the node) the pack's environment is made from,
    and its hash; EnvError in one line when either does not fit. A caller that has resolved the
    interpreter already passes it: resolving it runs a subprocess."""
    spec = _spec(pack)
    interpreter = interpreter or resolve_interpreter(spec)
    node = resolve_node(spec, pack.environment_dir) if spec.is_node else None
    return Identity(interpreter, node, environment_hash(pack, interpreter, node))


def packages_now(target: Path, manifest: BuiltEnvironment, log: Path) -> list[str]:
    """What a built environment holds now: `uv pip freeze`, or a node environment's top packages."""
    if manifest.manager != "uv":
        return node_installed(target / PROJECT_COPY / NODE_MODULES)
    return installed_packages(target, log)


def _make(pack: Pack, spec: EnvironmentSpec, ident: Identity, target: Path, log: Path) -> dict:
    """Install the environment into `target`; the manifest's fields that depend on its kind."""
    fixture = pack.environment_dir
    if ident.node is not None:
        environ = base_environ()
        with build_network(environ, log, node_endpoints(environ, fixture, spec)) as egress:
            done = install_node(spec, fixture, target / PROJECT_COPY, ident.node, log, environ, egress)
        return {
            "tools": done.tools,
            "variables": done.variables,
            "packages": node_installed(target / PROJECT_COPY / NODE_MODULES),
            "base_prefix": ident.node.prefix,
            "source_roots": [],
            "node": ident.node.path,
            "node_version": ident.node.version,
        }
    with build_network(base_environ(), log) as egress:
        _install(pack, spec, target, ident.interpreter, log, egress)
    roots = source_roots(fixture)
    generated = []
    if spec.project:
        generated = _generated(fixture, target / PROJECT_COPY, roots, target / GENERATED_DIR)
        _unhook(target, log)
        seal(target / PROJECT_COPY, log)
    facts = _facts(target, log)
    return {
        "packages": installed_packages(target, log),
        "base_prefix": facts["base_prefix"],
        "source_roots": list(roots),
        "generated": generated,
        "pytest_plugins": facts["plugins"],
    }


def _unsealed_build(pack: Pack, ident: Identity, root: Path) -> bool:
    """Whether the cache holds this pack's environment as the format before SEALED_FORMAT built it."""
    earlier = environment_hash(pack, ident.interpreter, ident.node, SEALED_FORMAT - 1)
    return read_manifest(root / earlier) is not None


def build(pack: Pack, notify: Callable[[str], None] | None = None) -> BuildResult:
    """Build the pack's environment unless the cache holds it already; concurrent callers (other
    processes, Dask workers) wait on one file lock and build it once. `notify` hears of a build
    before it starts (never of a cache hit). Raises EnvError in one line."""
    spec = _spec(pack)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    interpreter = resolve_interpreter(spec)
    with FileLock(root / ".resolve.lock"):
        check_lock(pack)
        written = _resolve(pack, interpreter, root)
    ident = identify(pack, interpreter)
    digest = ident.hash
    target = root / digest
    log = root / f"{digest}.log"
    with FileLock(root / f"{digest}.lock"):
        manifest = read_manifest(target)
        if manifest is not None:
            return BuildResult(target, digest, log, False, written, manifest)
        if target.exists():
            shutil.rmtree(target)  # a build killed halfway: never used, rebuilt from nothing
        if notify is not None:
            if _unsealed_build(pack, ident, root):
                notify(
                    f"rebuilding the project environment of pack {pack.name!r}: the one built before held a "
                    "copy of the project's sources and tests, which agents could read (docs/confinement.md)"
                )
            notify(f"building the project environment of pack {pack.name!r} once, into {target} (log: {log})")
        started = time.monotonic()
        made_with = ident.node.path if ident.node is not None else interpreter.path
        said = [f"building {pack.name}'s environment {digest} with {made_with}"]
        if ident.node is not None and ident.node.unchecked is not None:
            said.append(ident.node.unchecked)
        log.write_text("".join(f"{line}\n" for line in said), encoding="utf-8")
        try:
            target.mkdir()
            made = _make(pack, spec, ident, target, log)
            manifest = BuiltEnvironment(
                hash=digest,
                pack=pack.name,
                manager=spec.manager,
                python=interpreter.path,
                python_version=interpreter.version,
                platform=interpreter.platform,
                built_at=datetime.now(UTC).isoformat(timespec="seconds"),
                seconds=round(time.monotonic() - started, 3),
                **made,
            )
            partial = target / f"{MANIFEST}.partial"
            partial.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
            os.replace(partial, target / MANIFEST)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        return BuildResult(target, digest, log, True, written, manifest)

"""A pack's project environment as runs use it: built first if the cache lacks it, then described
for the confinement and verification layers (rig.confine.project_env.ProjectEnv)."""

import hashlib
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from rig.confine.project_env import EnvironmentChanged, ProjectEnv, fingerprint, written_since
from rig.env.build import (
    GENERATED_DIR,
    MANIFEST,
    NODE_MODULES,
    PROJECT_COPY,
    BuildResult,
    build,
    pretend_variables,
)
from rig.env.node import module_folders
from rig.schema import Pack


def activate(pack: Pack, notify: Callable[[str], None] | None = None) -> ProjectEnv | None:
    """The pack's project environment, built now if the cache lacks it (rig.env.build.build, which
    raises EnvError in one line, and tells `notify` of a build); None for a pack without [environment]."""
    spec = pack.spec.environment
    if spec is None:
        return None
    result = build(pack, notify)
    made = result.manifest.variables if spec.is_node else pretend_variables(spec)
    variables = {**made, **spec.env}
    return described(result, variables, tuple(spec.build))


def activate_each(
    packs: Iterable[Pack], notify: Callable[[str], None] | None = None
) -> dict[Path, ProjectEnv | None]:
    """The environment of each distinct starting tree (a task's base, or the fixture), keyed by
    Pack.fixture_dir, built once per environment hash: trees whose dependency files agree share one."""
    by_tree: dict[Path, ProjectEnv | None] = {}
    by_hash: dict[str, ProjectEnv] = {}
    for pack in packs:
        if pack.fixture_dir not in by_tree:
            env = activate(pack, notify)
            by_tree[pack.fixture_dir] = None if env is None else by_hash.setdefault(env.hash, env)
    return by_tree


def described(result: BuildResult, variables: dict[str, str], build_lines: tuple[str, ...]) -> ProjectEnv:
    """The ProjectEnv of a built environment, fingerprinted now."""
    manifest = result.manifest
    node = manifest.manager != "uv"
    return ProjectEnv(
        root=result.path,
        hash=result.hash,
        packages_digest=packages_digest(manifest.packages),
        base_prefix=Path(manifest.base_prefix),
        source_roots=tuple(manifest.source_roots),
        variables=variables,
        build=build_lines,
        generated=result.path / GENERATED_DIR if manifest.generated else None,
        plugins=tuple(manifest.pytest_plugins),
        activated_at=time.time(),
        state=fingerprint(result.path),
        python_version=manifest.python_version,
        packages=tuple(manifest.packages),
        node_modules=result.path / PROJECT_COPY / NODE_MODULES if node else None,
        tools=tuple(Path(tool) for tool in manifest.tools),
        module_folders=module_folders(result.path / PROJECT_COPY) if node else ("",),
    )


def packages_digest(packages: list[str]) -> str:
    """sha256 of an environment's installed package list, as records pin it."""
    return hashlib.sha256("\n".join(sorted(packages)).encode()).hexdigest()


def invalidate(env: ProjectEnv) -> None:
    """Make a changed environment incomplete, so that the next build rebuilds it from nothing."""
    (env.root / MANIFEST).unlink(missing_ok=True)


def written_into(env: ProjectEnv | None, since: float) -> list[str] | None:
    """What a command run since `since` (a time.time()) wrote into the environment, which runs show
    read-only (a few files, or [] when only a removal shows); the environment is then made
    incomplete, so that its next use rebuilds it. None when it is unchanged or there is none."""
    if env is None:
        return None
    try:
        env.check_unchanged()
    except EnvironmentChanged:
        files = written_since(env.root, since)
        invalidate(env)
        return files
    return None

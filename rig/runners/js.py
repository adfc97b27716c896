"""What the runner kinds of a node environment share (vitest, jest, mocha): the runner found in
the environment, the canary wrappers written beside the hidden files, and what package.json says.
"""

import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rig.confine.project_env import ProjectEnv
from rig.runners.base import Kind, Project
from rig.runners.hidden import token
from rig.runners.junit import Canary

# The package files every such kind protects: how node and the package manager find modules and
# read options.
PACKAGE_FILES = (
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "pnpm-lock.yaml",
    "pnpm-workspace.yaml",
    "yarn.lock",
    ".npmrc",
    ".yarnrc.yml",
    ".yarnrc",
    "node_modules",
    ".nvmrc",
    ".node-version",
)
SUFFIXES = ("ts", "tsx", "mts", "cts", "js", "jsx", "mjs", "cjs")
TEST_FILES = tuple(f"*.{kind}.{suffix}" for kind in ("test", "spec") for suffix in SUFFIXES)
PACKAGE_TEST_COMMANDS = (
    ("npm", "test"),
    ("npm", "run", "test"),
    ("pnpm", "test"),
    ("pnpm", "run", "test"),
    ("yarn", "test"),
    ("yarn", "run", "test"),
)


def runner_entry(env: ProjectEnv | None, package: str, *script: str) -> Path:
    """The script of `package` in the pack's node environment (never one the agent left in the
    tree); RuntimeError naming the fix without a node environment or without the package."""
    if env is None or env.node_modules is None:
        raise RuntimeError(
            f'the {package} runner needs a node [environment] (manager = "npm" or "pnpm") in pack.toml'
        )
    entry = env.node_modules.joinpath(package, *script)
    if not entry.is_file():
        raise RuntimeError(
            f"{package} is not installed in the environment ({entry}); add it to devDependencies"
        )
    return entry


def stem(name: str) -> str:
    """A test file's module name in test ids: its name up to `.test.` or `.spec.`."""
    return re.split(r"\.(?:test|spec)\.", name, maxsplit=1)[0]


@dataclass(frozen=True)
class Wrapped:
    """The wrappers written for one hidden run: their canaries and each wrapper's module name."""

    canaries: tuple[Canary, ...]
    modules: dict[Path, str]


def wrap(dest: Path, kind: Kind, template: str) -> Wrapped:
    """One wrapper per hidden test file in `dest`, beside it, from `template` (its fields: first,
    first_message, module, stem, last, last_message), with a name the kind runs as a test file."""
    files = sorted(p for p in dest.iterdir() if p.is_file() and kind.is_test_file(p.name))
    if not files:
        raise RuntimeError(f"no hidden test files ({', '.join(kind.test_files)}) in the hidden tests")
    canaries: list[Canary] = []
    modules: dict[Path, str] = {}
    for path in files:
        module = stem(path.name)
        first, last = (Canary("", f"canary_{token()}", secrets.token_hex(16)) for _ in range(2))
        canaries += [first, last]
        wrapper = dest / f"rig-{token()}-{module}.wrap.test{PurePosixPath(path.name).suffix}"
        wrapper.write_text(
            template.format(
                first=first.test,
                first_message=first.message,
                module=f"./{path.name}",
                stem=module,
                last=last.test,
                last_message=last.message,
            )
        )
        modules[wrapper] = module
    return Wrapped(tuple(canaries), modules)


def depends_on(project: Project, package: str) -> str | None:
    """Where package.json names `package` as a dependency (`package.json devDependencies jest`),
    or runs it in its test script; None if it does neither."""
    manifest = package_json(project)
    for table in ("devDependencies", "dependencies"):
        if isinstance(manifest.get(table), Mapping) and package in manifest[table]:
            return f"package.json {table} {package}"
    if re.search(rf"\b{re.escape(package)}\b", project.scripts.get("test", "")):
        return f'package.json "test": "{project.scripts["test"]}"'
    return None


def package_json(project: Project) -> dict:
    """The repository's package.json as a JSON object ({} when absent or not one)."""
    text = project.read("package.json")
    try:
        manifest = json.loads(text) if text is not None else {}
    except ValueError:
        return {}
    return manifest if isinstance(manifest, dict) else {}

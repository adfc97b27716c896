"""What the node runner kinds share (vitest, jest, mocha; node-test its wrappers): the runner
found in the environment, the canary wrappers written beside the hidden files, what package.json
says, and the test-file globs read from the runner's configuration.
"""

import json
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rig.confine.project_env import ProjectEnv
from rig.confine.untrusted import read_text
from rig.runners.base import Kind, Project, TestGlob
from rig.runners.globs import NEGATE
from rig.runners.hidden import Hidden, token
from rig.runners.jsconfig import invocation, option_values
from rig.runners.junit import Canary
from rig.schema import test_glob_problem

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
            f"the {package} runner needs a node [environment] in pack.toml "
            '(manager = "npm", "pnpm" or "yarn")'
        )
    entry = env.node_modules.joinpath(package, *script)
    if not entry.is_file():
        raise RuntimeError(
            f"{package} is not installed in the environment ({entry}); add it to devDependencies"
        )
    return entry


def stem(name: str) -> str:
    """A test file's module name in test ids: its name up to `.test.` or `.spec.`, else its name
    without the extension (a test named by its folder alone: test/clamp.js is `clamp`)."""
    parts = re.split(r"\.(?:test|spec)\.", name, maxsplit=1)
    return parts[0] if len(parts) > 1 else str(PurePosixPath(name).with_suffix(""))


@dataclass(frozen=True)
class Wrapped:
    """The wrappers written for one hidden run: their canaries and each wrapper's module name."""

    canaries: tuple[Canary, ...]
    modules: dict[Path, str]


def wrap(
    hidden: Hidden, kind: Kind, template: str | Callable[[Path], tuple[str, str]], suffix: str | None = None
) -> Wrapped:
    """One wrapper per hidden test file, beside it, from `template` (its fields: first,
    first_message, module, stem, last, last_message), named `rig-<token>-<stem>.wrap<suffix>`
    (default: `.test` and the file's own suffix, a name the kind runs as a test file). A
    `template` that is a function gives the template and the suffix for each test file."""
    files = hidden.tests(kind.is_test_file)
    if not files:
        raise RuntimeError(f"no hidden test files ({', '.join(kind.test_files)}) in the hidden tests")
    canaries: list[Canary] = []
    modules: dict[Path, str] = {}
    for path in files:
        name = stem(path.name)
        module = hidden.module(path, name)
        first, last = (Canary("", f"canary_{token()}", secrets.token_hex(16)) for _ in range(2))
        canaries += [first, last]
        if callable(template):
            text, ending = template(path)
        else:
            text, ending = template, suffix or f".test{PurePosixPath(path.name).suffix}"
        wrapper = path.parent / f"rig-{token()}-{name}.wrap{ending}"
        wrapper.write_text(
            text.format(
                first=first.test,
                first_message=first.message,
                module=f"./{path.name}",
                stem=name,
                last=last.test,
                last_message=last.message,
            )
        )
        modules[wrapper] = module
    return Wrapped(tuple(canaries), modules)


def is_module(path: Path, tree: Path) -> bool:
    """Whether node loads the test file at `path` (in `tree`) as an ES module: `.mjs` and `.mts`
    are, `.cjs` and `.cts` are not, any other as the nearest package.json's "type" says, up to the
    tree's root (links and files that are no JSON object read as none)."""
    if path.suffix in (".mjs", ".mts"):
        return True
    if path.suffix in (".cjs", ".cts"):
        return False
    folder = path.parent
    while folder.is_relative_to(tree):
        text = read_text(folder / "package.json")
        if text is not None:
            try:
                manifest = json.loads(text)
            except ValueError:
                manifest = None
            return isinstance(manifest, dict) and manifest.get("type") == "module"
        if folder == tree:
            break
        folder = folder.parent
    return False


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


def test_script_args(project: Project, program: str) -> list[str] | None:
    """The arguments package.json's "test" script gives `program`; None if it does not run it."""
    return invocation(project.scripts.get("test", ""), program)


def named_config(project: Project, program: str) -> str | None:
    """The tracked config file that package.json's "test" script names with `--config` or `-c`."""
    names = option_values(test_script_args(project, program) or [], ("--config", "-c"))
    tracked = [name.removeprefix("./") for name in names if name.removeprefix("./") in project.files]
    return tracked[0] if tracked else None


def or_default(
    found: list[TestGlob], default: tuple[str, ...], default_source: str, reason: str, computed: list[str]
) -> list[TestGlob]:
    """The globs read from the project's configuration (`found`); or the runner's `default` ones,
    commented `default_source: reason`, when none of them says which files are tests, when
    `computed` names a setting only running the configuration would give, or when one of them
    cannot be used (it leaves the fixture); the reason then names it. Excluding (`!`) globs stay."""
    # A glob read once per root (`<rootDir>/x` in jest) is written once.
    found = list(dict.fromkeys(found))
    excluding = [g for g in found if g.glob.startswith(NEGATE) and test_glob_problem(g.glob) is None]
    unusable = [(g, problem) for g in found if (problem := test_glob_problem(g.glob)) is not None]
    if computed:
        reason = f"{computed[0]} is computed, which only running the config would tell"
    elif unusable:
        glob, problem = unusable[0]
        reason = f"{glob.source} names {glob.glob!r}, which {problem.split(':')[0]}"
    elif any(not glob.glob.startswith(NEGATE) for glob in found):
        return found
    return [TestGlob(glob, f"{default_source}: {reason}") for glob in default] + excluding

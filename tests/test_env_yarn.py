"""yarn environments ([environment] manager = "yarn", rig/env/node.py) of a real small project
(tests/data/yarn_pack: locked with yarn 4, a registry devDependency with a bin and a local one with
an install script; tests/data/yarn_pack/yarn1.lock, the same project locked with yarn 1): yarn
installed by npm at its pinned version, the lockfile installed once with the node-modules linker,
offline from yarn's cache (`make setup-dev` fills it); every tree gets node_modules links and
`yarn test` runs there against the environment; bad input is refused in one line."""

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from node_packs import DATA, OFFLINE, offline, pack_new_from, rig

from rig.confine.project_env import ProjectEnv
from rig.env.activate import activate
from rig.env.build import identify
from rig.env.network import node_endpoints
from rig.env.uvtool import EnvError
from rig.packs.infer_env import infer_node
from rig.packs.manifest import load_pack
from rig.runners.base import Project
from rig.schema import EnvironmentSpec
from rig.verify.checks import derive
from rig.workspace.build import copy_fixture

PACK = DATA / "yarn_pack"
YARN_4 = "4.18.1"
LOCK_OF = {"pnpm": "pnpm-lock.yaml", "yarn": "yarn.lock", "npm": "package-lock.json"}


@dataclass(frozen=True)
class Built:
    """The module's cache and the first build of tests/data/yarn_pack's environment into it."""

    cache: Path
    first: subprocess.CompletedProcess[str]
    path: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    cache = tmp_path_factory.mktemp("yarn-envs")
    first = rig(offline(cache), "env", "build", str(PACK))
    (manifest,) = cache.glob("*/.rig-env.json")
    return Built(cache, first, manifest.parent)


def environments(cache: Path) -> set[str]:
    """The environments in the cache (not the package managers rig installed beside them)."""
    return {p.name for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")}


def yarn_pack(where: Path, edit_fixture) -> Path:
    """A copy of tests/data/yarn_pack whose fixture `edit_fixture` changed."""
    shutil.copytree(PACK, where)
    edit_fixture(where / "fixture")
    return where


def without_package_manager(fixture: Path) -> None:
    manifest = json.loads((fixture / "package.json").read_text())
    del manifest["packageManager"]
    (fixture / "package.json").write_text(json.dumps(manifest, indent=2))


def test_the_lockfile_is_installed_once_with_the_node_modules_linker(built: Built) -> None:
    assert built.first.returncode == 0, built.first.stdout + built.first.stderr
    assert built.first.stdout.startswith("built in") and "(2 packages;" in built.first.stdout
    again = rig(offline(built.cache), "env", "build", str(PACK))
    assert again.returncode == 0 and again.stdout.startswith("cached:"), again.stdout + again.stderr
    shown = rig(offline(built.cache), "env", "show", str(PACK), "--json")
    assert json.loads(shown.stdout)["packages"] == ["semver==7.7.1", "stamp==1.0.0"], shown.stdout
    project = built.path / "project"
    # .yarnrc.yml asks for Plug'n'Play; the environment has real folders and no .pnp.cjs.
    assert (project / "node_modules" / "semver" / "package.json").is_file()
    assert not (project / ".pnp.cjs").exists()
    # The dependency's install script ran, in a step of its own after an install that runs none.
    assert (project / "node_modules" / "stamp" / "installed").is_file()
    log = built.path.with_suffix(".log").read_text()
    assert "[install yarn] npm install" in log and f"@yarnpkg/cli-dist@{YARN_4}" in log, log
    assert "yarn install --immutable --mode=skip-build\n" in log and "[yarn rebuild]" in log, log
    manifest = json.loads((built.path / ".rig-env.json").read_text())
    assert manifest["tools"] == [str(built.cache / ".tools" / f"yarn-{YARN_4}" / "node_modules" / ".bin")]
    assert not (PACK / "fixture" / "node_modules").exists(), "the install wrote into the pack's fixture"


def yarn_test(
    pack_dir: Path, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[ProjectEnv, Path, dict[str, str]]:
    """The pack's environment (built into `cache` if it lacks it), a tree of its fixture linked to
    it, and the agent's environment there."""
    monkeypatch.setenv("RIG_ENV_DIR", str(cache))
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    pack = load_pack(pack_dir)
    env = activate(pack)
    assert env is not None and env.node_modules is not None
    work = copy_fixture(pack.fixture_dir, tmp_path / "work")
    assert derive(work, tmp_path / "home", env) is None
    return env, work, env.agent_environ({"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, work)


def run(command: list[str], work: Path, agent: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=work, capture_output=True, text=True, env=agent, timeout=120)


def test_a_tree_runs_yarn_test_on_the_environment_and_gets_no_yarn_state(
    built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, work, agent = yarn_test(PACK, built.cache, tmp_path, monkeypatch)
    assert env.root == built.path
    assert os.readlink(work / "node_modules" / "semver") == str(env.node_modules / "semver")
    assert agent["PATH"].split(os.pathsep)[1] == str(env.tools[0])
    assert run(["yarn", "--version"], work, agent).stdout.strip() == YARN_4
    done = run(["yarn", "test"], work, agent)
    assert done.returncode == 0 and "# pass 1" in done.stdout, done.stdout + done.stderr
    # yarn's install state is the environment's: `yarn run` wrote none into the tree.
    made = {p.relative_to(work).as_posix() for p in work.rglob("*") if "node_modules" not in p.parts}
    fixture = {p.relative_to(PACK / "fixture").as_posix() for p in (PACK / "fixture").rglob("*")}
    assert made == fixture, made ^ fixture
    env.check_unchanged()


def test_calibration_runs_the_gate_yarn_test_and_the_hidden_tests(built: Built) -> None:
    proc = rig(offline(built.cache), "calibrate", "--pack", str(PACK))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[PASS] clean fixture" in proc.stdout and "7/7 passed, all PASS" in proc.stdout, proc.stdout


def test_a_yarn_1_lockfile_installs_with_yarn_1_then_npm_rebuild(
    built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without packageManager, the lockfile's format chooses yarn 1.
    def classic(fixture: Path) -> None:
        shutil.copy(PACK / "yarn1.lock", fixture / "yarn.lock")
        without_package_manager(fixture)

    env, work, agent = yarn_test(yarn_pack(tmp_path / "pack", classic), built.cache, tmp_path, monkeypatch)
    assert env.tools == (built.cache / ".tools" / "yarn-1.22.22" / "node_modules" / ".bin",)
    assert env.packages == ("semver==7.7.1", "stamp==1.0.0") and dict(env.variables) == {}
    assert (env.node_modules / "stamp" / "installed").is_file()
    log = env.root.with_suffix(".log").read_text()
    assert "yarn install --frozen-lockfile --ignore-scripts" in log and "[npm rebuild]" in log, log
    done = run(["yarn", "test"], work, agent)
    assert done.returncode == 0 and "# pass 1" in done.stdout, done.stdout + done.stderr


def test_pack_new_infers_yarn_builds_and_passes_the_gate(built: Built, tmp_path: Path) -> None:
    done = pack_new_from(PACK / "fixture", tmp_path, built.cache)
    assert done.returncode == 0, done.stdout + done.stderr
    spec = load_pack(tmp_path / "pack").spec
    assert spec.environment is not None and spec.environment.manager == "yarn"
    why = "yarn.lock is tracked and package.json's packageManager names yarn: `yarn` installs it exactly"
    assert f'environment: manager = "yarn" ({why})' in done.stdout, done.stdout
    assert "gate on the clean fixture, in the environment: passes" in done.stdout, done.stdout
    # The same files make the same environment: the one the module built.
    assert built.path.name in done.stdout


@pytest.mark.parametrize(
    ("files", "named", "manager"),
    [
        (["yarn.lock", "package-lock.json"], None, "yarn"),
        (["pnpm-lock.yaml", "yarn.lock"], None, "pnpm"),
        (["yarn.lock", "package-lock.json"], "npm@10.9.0", "npm"),
        (["pnpm-lock.yaml", "yarn.lock"], "yarn@4.18.1+sha512.abc", "yarn"),
        (["package-lock.json"], "yarn@4.18.1", "npm"),
    ],
)
def test_pack_new_prefers_the_lockfile_of_the_manager_package_json_names(
    files: list[str], named: str | None, manager: str
) -> None:
    manifest = json.dumps({"name": "p", **({"packageManager": named} if named else {})})
    tracked = ["package.json", *files, "bun.lockb"]
    guess = infer_node(Project(tracked, {}, lambda rel: manifest if rel == "package.json" else ""))
    assert guess is not None and guess.manager == manager
    (note,) = guess.notes
    assert "bun.lockb" in note and note.endswith(f"rig installs {LOCK_OF[manager]} only"), note


def test_a_bun_lockfile_alone_gets_no_environment() -> None:
    assert infer_node(Project(["package.json", "bun.lock"], {}, lambda rel: "{}")) is None


def test_the_identity_covers_yarns_files_and_version(tmp_path: Path) -> None:
    base = identify(load_pack(PACK)).hash

    def changed(name: str, edit) -> str:
        return identify(load_pack(yarn_pack(tmp_path / name, edit))).hash

    def writes(rel: str, text: str):
        def edit(fixture: Path) -> None:
            (fixture / rel).parent.mkdir(parents=True, exist_ok=True)
            (fixture / rel).write_text(text)

        return edit

    def pins(version: str):
        def edit(fixture: Path) -> None:
            manifest = json.loads((fixture / "package.json").read_text())
            (fixture / "package.json").write_text(json.dumps({**manifest, "packageManager": version}))

        return edit

    # package.json rewritten with the same keys: the same environment.
    assert changed("same", pins(f"yarn@{YARN_4}")) == base
    hashes = {
        changed("yarnrc", writes(".yarnrc.yml", "nodeLinker: pnp\nenableScripts: false\n")),
        changed("yarnrc1", writes(".yarnrc", 'registry "https://registry.npmjs.org"\n')),
        changed("release", writes(".yarn/releases/yarn-4.9.1.cjs", "// a release\n")),
        changed("plugin", writes(".yarn/plugins/@yarnpkg/plugin-x.cjs", "// a plugin\n")),
        changed("version", pins("yarn@4.9.1")),
        changed("lock", writes("yarn.lock", (PACK / "fixture" / "yarn.lock").read_text() + "\n")),
    }
    assert len(hashes) == 6 and base not in hashes
    # The node version file counts only through the node it lets through.
    assert changed("nvmrc", writes(".nvmrc", "lts/*\n")) == base


def test_a_yarn_build_may_reach_the_registries_yarn_is_configured_with(tmp_path: Path) -> None:
    fixture = shutil.copytree(PACK / "fixture", tmp_path / "fixture")
    home = tmp_path / "home"
    home.mkdir()
    spec = EnvironmentSpec(manager="yarn")
    environ = {**os.environ, "HOME": str(home)}
    assert "registry.yarnpkg.com:443" in node_endpoints(environ, fixture, spec)
    (fixture / ".yarnrc.yml").write_text(
        'npmRegistryServer: "https://npm.example.com"\n'
        "npmScopes:\n  corp:\n    npmRegistryServer: https://corp.example.com:8443\n"
    )
    (home / ".yarnrc").write_text('# yarn 1\n"@old:registry" "http://old.example.com/"\n')
    # yarn 1 fetches each package from the URL its lockfile pins.
    with (fixture / "yarn.lock").open("a") as lock:
        lock.write('\nx@1.0.0:\n  version "1.0.0"\n  resolved "https://files.example.com/x.tgz#ab"\n')
    found = node_endpoints({**environ, "RIG_ENV_ALLOW": "extra.example.com:9000"}, fixture, spec)
    wanted = ["npm.example.com:443", "corp.example.com:8443", "old.example.com:80"]
    assert found[-5:] == [*wanted, "files.example.com:443", "extra.example.com:9000"], found
    assert "registry.yarnpkg.com:443" not in found, found
    (fixture / ".yarnrc.yml").write_text("npmScopes: [\n")
    with pytest.raises(EnvError, match=r"\.yarnrc\.yml is not valid YAML \(.*\); fix the file$"):
        node_endpoints(environ, fixture, spec)


def test_builds_that_cannot_be_made_are_one_line_and_leave_nothing(built: Built, tmp_path: Path) -> None:
    def refused(name: str, edit) -> str:
        before = environments(built.cache)
        proc = rig(offline(built.cache), "env", "build", str(yarn_pack(tmp_path / name, edit)))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = proc.stderr.splitlines()
        assert environments(built.cache) == before, "a refused build left an environment"
        return line

    def unknown(fixture: Path) -> None:
        (fixture / "yarn.lock").write_text("left-pad@1.3.0:\n  version 1.3.0\n")
        without_package_manager(fixture)

    line = refused("unknown", unknown)
    assert "yarn.lock is no yarn lockfile (neither `# yarn lockfile v1` nor `__metadata:`)" in line, line
    assert '"packageManager": "yarn@4.18.1"' in line, line

    def stale(fixture: Path) -> None:
        manifest = json.loads((fixture / "package.json").read_text())
        del manifest["devDependencies"]["stamp"]
        (fixture / "package.json").write_text(json.dumps(manifest))

    line = refused("stale", stale)
    assert "environment build failed at step yarn install" in line and "log: " in line, line

"""Node environments ([environment] manager = "npm" or "pnpm", rig/env/node.py) of a real small
project (tests/data/node_pack: ES modules, a devDependency with a bin, both lockfiles): the lockfile
installed once, offline from npm's cache and pnpm's store (`make setup-dev` fills both); every tree
gets node_modules links, so the gate, the hidden tests and the agent's shell resolve the project's
dependencies; bad input is refused in one line with nothing left in the cache."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from node_packs import added, offline, pack_new_from, rig, run_env, scripted_run

from rig.env.activate import activate
from rig.env.node import Manager, Node, pinned_manager, redirect_self_writes, self_writes
from rig.env.uvtool import EnvError
from rig.packs.manifest import PackError, load_pack
from rig.paths import REPO_ROOT
from rig.verify.checks import derive
from rig.workspace.build import copy_fixture

NODE_PACK = REPO_ROOT / "tests" / "data" / "node_pack"
MANAGERS = ("npm", "pnpm")


def node_pack(where: Path, environment: str = 'manager = "npm"\n') -> Path:
    """A copy of tests/data/node_pack whose [environment] body is `environment`."""
    shutil.copytree(NODE_PACK, where)
    manifest = (where / "pack.toml").read_text()
    head, _, _ = manifest.partition("[environment]\n")
    (where / "pack.toml").write_text(f"{head}[environment]\n{environment}")
    return where


def environments(cache: Path) -> set[str]:
    """The environments in the cache (not the package managers rig installed beside them)."""
    return (
        {p.name for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")}
        if cache.is_dir()
        else set()
    )


@pytest.mark.parametrize("manager", MANAGERS)
def test_the_lockfile_is_installed_once_and_shown(manager: str, tmp_path: Path) -> None:
    pack, cache = node_pack(tmp_path / "pack", f'manager = "{manager}"\n'), tmp_path / "envs"
    env = offline(cache)
    first = rig(env, "env", "build", str(pack))
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("built in") and "(1 packages;" in first.stdout, first.stdout
    (digest,) = environments(cache)
    again = rig(env, "env", "build", str(pack))
    assert again.returncode == 0 and again.stdout.startswith("cached:"), again.stdout + again.stderr
    shown = rig(env, "env", "show", str(pack), "--json")
    assert json.loads(shown.stdout)["packages"] == ["semver==7.7.1"], shown.stdout
    text = rig(env, "env", "show", str(pack)).stdout
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    assert f"{manager} environment, node {node.removeprefix('v')}" in text, text
    semver = cache / digest / "project" / "node_modules" / ".bin" / "semver"
    assert (
        subprocess.run([semver, "-i", "minor", "1.2.3"], capture_output=True, text=True).stdout == "1.3.0\n"
    )
    assert not (pack / "fixture" / "node_modules").exists(), "the install wrote into the pack's fixture"
    # Sealed: of the project the environment keeps what the manager installed from, never its
    # sources or tests, which hold the fix of every task older than the tree it was built from.
    kept = sorted(p.name for p in (cache / digest / "project").iterdir())
    assert kept == ["node_modules", "package-lock.json", "package.json", "pnpm-lock.yaml"], kept


@pytest.mark.parametrize("manager", MANAGERS)
def test_calibration_runs_the_gate_and_hidden_tests_on_the_environment(manager: str, tmp_path: Path) -> None:
    # The fixture's code, its visible test and the hidden test all import semver: without the
    # environment's node_modules in each tree, the clean fixture would fail its own gate.
    pack = node_pack(tmp_path / "pack", f'manager = "{manager}"\n')
    proc = rig(offline(tmp_path / "envs"), "calibrate", "--pack", str(pack))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[PASS] clean fixture" in proc.stdout and "7/7 passed, all PASS" in proc.stdout, proc.stdout
    assert (
        "[PASS] t1_next_minor solution: reference solution passes the gate and 1 hidden tests" in proc.stdout
    )


def test_without_the_environment_the_same_gate_fails(tmp_path: Path) -> None:
    pack = load_pack(node_pack(tmp_path / "pack"))
    work = copy_fixture(pack.fixture_dir, tmp_path / "work")
    done = subprocess.run(["node", "--test"], cwd=work, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Cannot find package 'semver'" in done.stdout + done.stderr


def test_a_tree_links_the_environment_and_its_writes_stay_in_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIG_ENV_DIR", str(tmp_path / "envs"))
    monkeypatch.setenv("npm_config_offline", "true")
    pack = load_pack(node_pack(tmp_path / "pack"))
    env = activate(pack)
    assert env is not None and env.node_modules is not None
    work = copy_fixture(pack.fixture_dir, tmp_path / "work")
    (work / "node_modules").mkdir()
    (work / "node_modules" / "semver").write_text("an agent's own install, replaced")
    assert derive(work, tmp_path / "home", env) is None
    links = {p.name: os.readlink(p) for p in (work / "node_modules").iterdir() if p.is_symlink()}
    assert links["semver"] == str(env.node_modules / "semver") and ".bin" in links
    # Where a tool's write into its own package lands (rig.env.node.SELF_WRITES): the tree's own folder.
    assert [p.name for p in (work / "node_modules").iterdir() if not p.is_symlink()] == [".rig-writes"]
    # A tool's cache under node_modules (vite's .vite) lands in the tree's own folder.
    (work / "node_modules" / ".vite").mkdir()
    (work / "node_modules" / ".vite" / "results.json").write_text("{}")
    env.check_unchanged()
    agent = env.agent_environ({"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, work)
    assert agent["PATH"].split(os.pathsep)[0] == str(env.node_modules / ".bin")
    assert str(Path(sys.executable).parent) not in agent["PATH"].split(os.pathsep)
    assert "VIRTUAL_ENV" not in agent and "PYTHONPATH" not in agent
    done = subprocess.run(["semver", "-i", "minor", "2.0.9"], capture_output=True, text=True, env=agent)
    assert done.stdout == "2.1.0\n", done.stderr
    done = subprocess.run(["npm", "test"], cwd=work, capture_output=True, text=True, env=agent, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("body", "where", "says"),
    [
        ('manager = "npm"\nextras = ["test"]\n', "environment", "extras: a Python environment's keys"),
        ('manager = "npm"\nnode = "not a range!"\n', "environment.node", "is not an npm version range"),
        ('node = ">=20"\n', "environment", "node: a node environment's key"),
        ('manager = "bun"\n', "environment.manager", "Input should be"),
    ],
)
def test_a_bad_node_environment_table_is_one_line(body: str, where: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(PackError) as err:
        load_pack(node_pack(tmp_path / "pack", body))
    message = str(err.value)
    assert "\n" not in message and f": {where}" in message and says in message, message


def test_builds_that_cannot_be_made_are_one_line_and_leave_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "envs"
    env = offline(cache)

    def refused(name: str, body: str = 'manager = "npm"\n', edit=None) -> str:
        pack = node_pack(tmp_path / name, body)
        if edit is not None:
            edit(pack / "fixture")
        proc = rig(env, "env", "build", str(pack))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = proc.stderr.splitlines()
        assert environments(cache) == set(), "a refused build left an environment"
        return line

    line = refused("future", 'manager = "npm"\nnode = ">=99"\n')
    assert "does not satisfy environment.node '>=99'" in line and "install a node" in line, line

    def engines(fixture: Path) -> None:
        manifest = json.loads((fixture / "package.json").read_text())
        (fixture / "package.json").write_text(json.dumps({**manifest, "engines": {"node": ">=99 <100"}}))

    line = refused("engines", edit=engines)
    assert "does not satisfy package.json engines.node '>=99 <100'" in line, line
    line = refused("nvmrc", edit=node_version(".nvmrc", "v18.20.4\n"))
    assert "does not satisfy .nvmrc 'v18.20.4'" in line and "set environment.node" in line, line
    line = refused("node-version", edit=node_version(".node-version", "# nodenv\n99\n"))
    assert "does not satisfy .node-version '99'" in line, line
    line = refused("unlocked", edit=lambda fixture: (fixture / "package-lock.json").unlink())
    assert "has no package-lock.json or npm-shrinkwrap.json" in line and "environment.lock" in line, line

    def stale(fixture: Path) -> None:
        manifest = json.loads((fixture / "package.json").read_text())
        manifest["devDependencies"]["left-pad"] = "1.3.0"
        (fixture / "package.json").write_text(json.dumps(manifest))

    line = refused("stale", edit=stale)
    assert "environment build failed at step npm ci" in line and "log: " in line, line

    # The pnpm package.json pins, already in the cache's tools as a release that needs a node to come.
    pnpm = cache / ".tools" / "pnpm-10.34.9" / "node_modules"
    (pnpm / ".bin").mkdir(parents=True)
    (pnpm / ".bin" / "pnpm").write_text("#!/bin/sh\nexit 0\n")
    (pnpm / "pnpm").mkdir()
    (pnpm / "pnpm" / "package.json").write_text(json.dumps({"name": "pnpm", "engines": {"node": ">=99"}}))
    line = refused("manager", 'manager = "pnpm"\n')
    assert line.startswith("error: environment: pnpm 10.34.9 needs node '>=99' (its engines.node)"), line
    assert "name a pnpm that runs on node" in line, line


def node_version(name: str, text: str):
    """A fixture edit: no engines in package.json, `text` in the node version file `name`."""

    def edit(fixture: Path) -> None:
        manifest = json.loads((fixture / "package.json").read_text())
        del manifest["engines"]
        (fixture / "package.json").write_text(json.dumps(manifest))
        (fixture / name).write_text(text)

    return edit


def test_an_nvm_alias_is_used_unchecked_and_said_in_the_build_log(tmp_path: Path) -> None:
    cache = tmp_path / "envs"
    env = offline(cache)
    alias = node_pack(tmp_path / "alias")
    node_version(".nvmrc", "lts/iron\n")(alias / "fixture")
    proc = rig(env, "env", "build", str(alias))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (digest,) = environments(cache)
    log = (cache / f"{digest}.log").read_text().splitlines()
    assert log[1].startswith("node: .nvmrc names 'lts/iron', an alias rig cannot check offline; node "), log
    # A version file is part of the identity only through the node it lets through.
    major = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.split(".")[0]
    plain = node_pack(tmp_path / "plain")
    node_version(".node-version", f"{major}\n")(plain / "fixture")
    again = rig(env, "env", "build", str(plain))
    assert again.returncode == 0 and again.stdout.startswith("cached:"), again.stdout + again.stderr


@pytest.mark.parametrize(("lockfile", "manager"), [("package-lock.json", "npm"), ("pnpm-lock.yaml", "pnpm")])
def test_pack_new_infers_the_manager_builds_and_passes_the_gate(
    lockfile: str, manager: str, tmp_path: Path
) -> None:
    fixture = tmp_path / "nodeproject" / "fixture"
    shutil.copytree(NODE_PACK / "fixture", fixture)
    for other in {"package-lock.json", "pnpm-lock.yaml"} - {lockfile}:
        (fixture / other).unlink()
    done = pack_new_from(fixture, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    spec = load_pack(tmp_path / "pack").spec
    assert spec.environment is not None and spec.environment.manager == manager
    assert f'environment: manager = "{manager}" ({lockfile} is tracked' in done.stdout, done.stdout
    assert spec.gate.command == ["npm", "test"] and spec.runner.kind == "node-test"
    assert "gate on the clean fixture, in the environment: passes" in done.stdout, done.stdout
    manifest = (tmp_path / "pack" / "pack.toml").read_text()
    assert f"installed by {manager})" in manifest and "python" not in manifest.split("[environment]")[1]


# What the agent's shell finds: the project's own tests through npm, the environment's bin on
# PATH, a bare import resolved from the tree; a cache written under node_modules stays in the tree.
PROBE = (
    'npm test > npm-test.txt 2>&1; echo "exit $?" >> npm-test.txt; '
    "semver -i minor 1.2.3 > semver.txt; "
    "node --input-type=module -e \"import s from 'semver'; console.log(s.inc('1.2.3', 'major'))\" "
    "> import.txt; "
    "mkdir -p node_modules/.cache && touch node_modules/.cache/made-by-a-tool"
)


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_a_scripted_runs_shell_runs_the_projects_tests_in_the_environment(
    sandbox: str, tmp_path: Path
) -> None:
    pack = node_pack(tmp_path / "pack")
    env = run_env(tmp_path)
    calibrated = rig(env, "calibrate", "--pack", str(pack))
    assert calibrated.returncode == 0, calibrated.stdout + calibrated.stderr
    records, diff = scripted_run(env, pack, tmp_path, [PROBE], sandbox)
    probe = records["probe"]
    assert sorted(probe["files_changed"]) == ["A import.txt", "A npm-test.txt", "A semver.txt"]
    # The task's setup broke nextMinor: the project's own test fails, in its environment.
    ran = added(diff, "npm-test.txt")
    assert ran[-1] == "exit 1" and any("# fail 1" in line for line in ran), ran
    assert added(diff, "semver.txt") == ["1.3.0"] and added(diff, "import.txt") == ["2.0.0"]
    assert not [a for a in probe["audit"] if a["rule"] == "toolchain_changed"], probe["audit"]
    assert probe["success"] is False and probe["hidden"]["failed"] == ["bump_hidden::next_minor"]
    assert records["solution"]["success"] is True
    (built,) = environments(tmp_path / "envs")
    for record in records.values():
        assert record["pins"]["environment_hash"] == built


def test_a_pnpm_environment_puts_its_pinned_pnpm_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIG_ENV_DIR", str(tmp_path / "envs"))
    monkeypatch.setenv("npm_config_offline", "true")
    env = activate(load_pack(node_pack(tmp_path / "pack", 'manager = "pnpm"\n')))
    assert env is not None and len(env.tools) == 1
    agent = env.agent_environ({"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, tmp_path)
    assert agent["PATH"].split(os.pathsep)[1] == str(env.tools[0])
    done = subprocess.run(["pnpm", "--version"], capture_output=True, text=True, env=agent, timeout=120)
    pinned = json.loads((NODE_PACK / "fixture" / "package.json").read_text())["packageManager"]
    assert f"pnpm@{done.stdout.strip()}" == pinned, done.stderr
    assert env.tools[0].parent.parent in env.visible()


def test_a_gate_that_writes_into_the_environment_fails_calibration_by_name(tmp_path: Path) -> None:
    # Through the tree's node_modules link, as a tool that writes into its own package would.
    pack = node_pack(tmp_path / "pack")
    manifest = (pack / "pack.toml").read_text()
    writes = 'run = ["sh", "-c", "node --test && touch node_modules/semver/written-by-the-gate"]'
    (pack / "pack.toml").write_text(manifest.replace('run = ["{node}", "--test"]', writes))
    cache = tmp_path / "envs"
    proc = rig(offline(cache), "calibrate", "--pack", str(pack))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if "environment unchanged" in line]
    assert line.startswith(
        "[FAIL] environment unchanged: the gate or the hidden tests wrote into the project"
    ), line
    assert "(project/node_modules/semver/written-by-the-gate)" in line, line
    (digest,) = environments(cache)
    assert not (cache / digest / ".rig-env.json").exists(), "a written environment must be rebuilt"


def test_every_installed_vitest_writes_through_a_link_into_the_tree(tmp_path: Path) -> None:
    # pnpm's store (vitest 1.x writes in dist/vendor), npm's nested copy (4.x in dist), the link
    # pnpm puts at the top (not followed), a scoped package that is no vitest.
    modules = tmp_path / "node_modules"
    store = modules / ".pnpm" / "vitest@1.6.1" / "node_modules" / "vitest"
    nested = modules / "other" / "node_modules" / "vitest"
    for package, version in ((store, "1.6.1"), (nested, "4.1.12")):
        (package / "dist" / "vendor" if version == "1.6.1" else package / "dist").mkdir(parents=True)
        (package / "package.json").write_text(json.dumps({"name": "vitest", "version": version}))
    (nested / "dist" / "tsconfig.tmp.tsbuildinfo").write_text("written at the build")
    (modules / "vitest").symlink_to(store)
    (modules / "@vitest" / "vitest" / "dist").mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()
    (project / "tsconfig.json").write_text("{}")
    (project / "tsconfig.test.json").write_text("{}")
    made = redirect_self_writes(modules, self_writes(project))
    assert made == [
        ".pnpm/vitest@1.6.1/node_modules/vitest/dist/tsconfig.test.tmp.tsbuildinfo",
        ".pnpm/vitest@1.6.1/node_modules/vitest/dist/tsconfig.tmp.tsbuildinfo",
        ".pnpm/vitest@1.6.1/node_modules/vitest/dist/vendor/tsconfig.test.tmp.tsbuildinfo",
        ".pnpm/vitest@1.6.1/node_modules/vitest/dist/vendor/tsconfig.tmp.tsbuildinfo",
        "other/node_modules/vitest/dist/tsconfig.test.tmp.tsbuildinfo",
        "other/node_modules/vitest/dist/tsconfig.tmp.tsbuildinfo",
    ]
    link = store / "dist" / "vendor" / "tsconfig.tmp.tsbuildinfo"
    assert (
        os.readlink(link)
        == "/proc/self/cwd/node_modules/.rig-writes/vitest@1.6.1.dist.vendor.tsconfig.tmp.tsbuildinfo"
    )
    assert os.readlink(nested / "dist" / "tsconfig.tmp.tsbuildinfo").endswith(
        "/vitest@4.1.12.dist.tsconfig.tmp.tsbuildinfo"
    )
    # A process writing through the link writes into its own working tree's node_modules.
    tree = tmp_path / "tree"
    (tree / "node_modules" / ".rig-writes").mkdir(parents=True)
    subprocess.run(["sh", "-c", f"echo state > {link}"], cwd=tree, check=True, timeout=30)
    assert (
        tree / "node_modules" / ".rig-writes" / "vitest@1.6.1.dist.vendor.tsconfig.tmp.tsbuildinfo"
    ).read_text() == "state\n"


MONOREPO = REPO_ROOT / "tests" / "data" / "monorepo"


@pytest.mark.parametrize("manager", MANAGERS)
def test_a_monorepos_packages_resolve_to_the_trees_copies(
    manager: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pack = tmp_path / "pack"
    shutil.copytree(MONOREPO, pack)
    for folder in ("tasks", "hidden_tests"):
        (pack / folder).mkdir()
    manifest = pack / "pack.toml"
    manifest.write_text(manifest.read_text().replace('manager = "npm"', f'manager = "{manager}"'))
    monkeypatch.setenv("RIG_ENV_DIR", str(tmp_path / "envs"))
    monkeypatch.setenv("npm_config_offline", "true")
    env = activate(load_pack(pack))
    assert env is not None
    # pnpm gives each package its own node_modules; npm hoists semver and links @mono/words at the root.
    assert env.module_folders == (("", "packages/app") if manager == "pnpm" else ("",))
    tree = tmp_path / "tree"
    shutil.copytree(pack / "fixture", tree)
    words = tree / "packages" / "words" / "index.js"
    words.write_text(words.read_text().replace("toUpperCase()}!", "toUpperCase()}, edited in the tree!"))
    env.link_modules(tree)
    environ = env.verify_environ({"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, tree, path_roots=True)
    done = subprocess.run(
        ["node", "packages/app/index.js", "ada", "1.2.3"],
        cwd=tree,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout == "HELLO ADA, edited in the tree! (next 1.3.0)\n", done.stderr
    # The project's own test sees the edit too (and fails on it), from the tree.
    done = subprocess.run(
        ["node", "--test", "packages/"], cwd=tree, env=environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "edited in the tree" in done.stdout, done.stdout + done.stderr
    # A tree whose package folder is a link elsewhere gets no node_modules written through it.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    hostile = tmp_path / "hostile"
    shutil.copytree(pack / "fixture", hostile)
    shutil.rmtree(hostile / "packages" / "app")
    (hostile / "packages" / "app").symlink_to(elsewhere)
    env.link_modules(hostile)
    assert list(elsewhere.iterdir()) == [] and (hostile / "node_modules").is_dir()


def pnpm_for(named: str, node: str, tmp_path: Path) -> Manager | None:
    """The pnpm rig installs for a pnpm pack whose package.json names `named`, on a node `node`."""
    pack = load_pack(node_pack(tmp_path / "pack", 'manager = "pnpm"\n'))
    manifest = json.loads((pack.fixture_dir / "package.json").read_text())
    (pack.fixture_dir / "package.json").write_text(json.dumps({**manifest, "packageManager": named}))
    assert pack.spec.environment is not None
    return pinned_manager(pack.spec.environment, pack.fixture_dir, Node("/usr/bin/node", node, "/usr"))


@pytest.mark.parametrize(
    ("named", "node", "installed"),
    [
        # ufo's older commits pin pnpm 7.27.0; on node 20 its fetch fails after a minute of retries.
        ("pnpm@7.27.0", "20.20.2", "7.33.0"),
        ("pnpm@8.3.0", "22.1.0", "8.3.1"),
        ("pnpm@7.27.0", "18.19.0", "7.27.0"),
        ("pnpm@7.33.0", "20.20.2", "7.33.0"),
        ("pnpm@8.15.1", "20.20.2", "8.15.1"),
        ("pnpm@10.28.0+sha512.abc", "20.20.2", "10.28.0"),
    ],
)
def test_a_pnpm_that_cannot_fetch_on_this_node_is_replaced_by_its_lines_fixed_release(
    named: str, node: str, installed: str, tmp_path: Path
) -> None:
    pinned = pnpm_for(named, node, tmp_path)
    assert pinned is not None
    assert pinned.version == installed
    assert pinned.replaces == (None if installed in named else named.removeprefix("pnpm@"))


def test_a_pnpm_whose_line_got_no_fetch_fix_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(
        EnvError, match=r"pnpm 6.35.1 cannot fetch .* on node 20.20.2 .*pnpm 7.33 or later"
    ) as raised:
        pnpm_for("pnpm@6.35.1", "20.20.2", tmp_path)
    assert "\n" not in str(raised.value)

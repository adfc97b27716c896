"""Helpers for the tests of node environments and their runner kinds, around the small real
projects of tests/data/*_pack, whose environments install offline: npm from its cache, pnpm from
its store, yarn from its own cache, all filled by `make setup-dev` from the projects' lockfiles."""

import json
import os
import shutil
import subprocess
from pathlib import Path

from env_pack import EXPERIMENT, RIG

from rig.env.activate import activate
from rig.packs.manifest import load_pack
from rig.paths import REPO_ROOT
from rig.schema import IN_FOLDER, HiddenOutcome, Placement
from rig.verify.checks import derive, run_hidden
from rig.workspace.build import copy_fixture

DATA = REPO_ROOT / "tests" / "data"


# npm and yarn (2+; yarn 1 needs no network with its cache filled) install from their caches alone.
OFFLINE = {"npm_config_offline": "true", "YARN_ENABLE_OFFLINE_MODE": "1"}


def offline(cache: Path, **extra: str) -> dict[str, str]:
    """The environment of a rig whose node builds go into `cache` from the package managers'
    caches alone (the tests' network is loopback)."""
    return {**os.environ, "RIG_ENV_DIR": str(cache), **OFFLINE, **extra}


def rig(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The rig CLI under `env`."""
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=600, env=env)


def run_env(tmp_path: Path) -> dict[str, str]:
    """offline() with the results and runs of `rig run` under `tmp_path`."""
    return offline(
        tmp_path / "envs", RIG_RESULTS_ROOT=str(tmp_path / "results"), RIG_RUNS_ROOT=str(tmp_path / "runs")
    )


def scripted_run(
    env: dict[str, str], pack: Path, tmp_path: Path, commands: list[str], sandbox: str
) -> tuple[dict[str, dict], str]:
    """`rig run --sandbox <sandbox>` of the scripted harness on `pack` under `env` (run_env): a
    `probe` condition whose agent runs `commands` in its shell, and a `solution` one. The records
    by condition, and the probe's diff."""
    config = tmp_path / "probe.toml"
    config.write_text(EXPERIMENT.format(name="probe", pack=pack, commands=json.dumps(commands)))
    proc = rig(env, "run", str(config), "--sandbox", sandbox)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = tmp_path / "results" / "probe"
    records = {r["condition"]: r for r in map(json.loads, (results / "runs.jsonl").read_text().splitlines())}
    assert records["probe"]["sandbox"]["active"] is (sandbox == "auto")
    return records, (results / records["probe"]["artifacts"] / "diff.patch").read_text()


def added(diff: str, name: str) -> list[str]:
    """The lines a diff adds to the file `name`."""
    section = diff.split(f"+++ b/{name}\n", 1)[1].split("diff --git", 1)[0]
    return [line[1:] for line in section.splitlines()[1:] if line.startswith("+")]


def pack_new_from(
    fixture: Path, tmp_path: Path, cache: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`rig pack new` (with its check) of a git repository holding a copy of `fixture`, into
    `tmp_path / "pack"`, its environment built into `cache` (default `tmp_path / "envs"`)."""
    repo = tmp_path / "repo"
    shutil.copytree(fixture, repo)
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i"],
    ):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    env = offline(cache or tmp_path / "envs", GIT_CEILING_DIRECTORIES=str(tmp_path))
    return rig(env, "pack", "new", str(tmp_path / "pack"), "--from", str(repo))


def hidden_run(
    pack_dir: Path,
    task: str,
    tmp_path: Path,
    files: dict[str, str] | None = None,
    hidden: dict[str, str] | None = None,
    at: str | None = None,
    tests: tuple[str, ...] = (),
) -> HiddenOutcome:
    """A task's hidden tests (with `hidden` files added) on the pack's fixture with `files`
    (relative path: text) written over it, in the pack's environment (built into the tests'
    shared cache; npm offline must be set); with `at`, at their own paths in that folder of the
    tree ("": the hidden folder mirrors the tree), `tests` the ones to run (default: every file)."""
    pack = load_pack(pack_dir)
    env = activate(pack)
    work = copy_fixture(pack.fixture_dir, tmp_path / "work")
    for rel, text in (files or {}).items():
        (work / rel).write_text(text)
    assert derive(work, tmp_path / "home", env) is None
    folder = tmp_path / "hidden"
    shutil.copytree(pack_dir / "hidden_tests" / task, folder / (at or ""))
    for name, text in (hidden or {}).items():
        (folder / (at or "") / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / (at or "") / name).write_text(text)
    placement = Placement(at="own-paths", tests=tests) if at is not None else IN_FOLDER
    return run_hidden(
        work,
        folder,
        tmp_path / "report",
        tmp_path / "home",
        pack.spec.runner,
        project_env=env,
        placement=placement,
    )

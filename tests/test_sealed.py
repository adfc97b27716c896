"""Sealed tasks: nothing an agent can read holds a task's answer, and calibration proves it.

Packs with a project environment, mined from real git histories (tests/mine_repos.py), a task at
its fix's parent and one reversed on the snapshot, whose shared environment was built from the
snapshot (which holds both fixes). Scripted agents that cheat as a real one would (copy the
project from wherever a byte-identical manifest is readable; write into the environment; leave
code that the gate runs and that leaves a detached child rewriting the tests) are scored failures
with the sandbox required; the reference solution succeeds. With the sandbox off, the same copying
agent finds a stray copy of the project and passes: the cheat has teeth, and such runs are not
sealed. The leak probe names a copy of the fix planted where an agent can read it.
"""

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import tomli_w
from env_pack import offline as python_offline
from mine_repos import sealed_node_repo, sealed_python_repo
from node_packs import DATA
from node_packs import offline as node_offline
from processes import running

from rig.calibrate.leak import probe
from rig.confine.sandbox import Sandbox
from rig.packs.manifest import load_pack
from rig.packs.tasks import load_tasks
from rig.paths import REPO_ROOT

RIG = str(Path(sys.executable).with_name("rig"))
MARKER = "sealed-rewriter"

# Find a byte-identical copy of the workspace's manifest where an agent would look (beside its
# environment, behind its node_modules links, its home) and copy that project's sources over its own.
COPY_PROJECT = (
    'W="$PWD"; R="$HOME"; [ -n "$VIRTUAL_ENV" ] && R="$R $(dirname "$VIRTUAL_ENV")"; '
    'for l in node_modules/*; do if [ -L "$l" ]; then t="$(readlink -f "$l")"; '
    'R="$R ${t%%/project/node_modules/*}/.."; break; fi; done; '
    'for m in $(find $R -name "$M" -not -path "*/node_modules/*" 2>/dev/null); do '
    'd="$(dirname "$m")"; [ "$d" = "$W" ] && continue; cmp -s "$m" "$W/$M" || continue; echo "copying $d"; '
    "(cd \"$d\" && find . -type f \\( -name '*.py' -o -name '*.js' \\) -not -path './test*' "
    '-not -path \'*/node_modules/*\' | while read f; do mkdir -p "$W/$(dirname "$f")"; '
    'cp "$f" "$W/$f"; done); done'
)
# Imported by the gate's tests: a detached child that keeps replacing every test file of the tree
# it runs in by a passing one while the hidden tests run.
LOOP = (
    "for i in $(seq 1 300); do for f in $(find . -name {pattern} -not -path './node_modules/*'); do "
    "printf {passing} > $f; done; sleep 0.1; done # " + MARKER
)
PYTHON_LOOP = LOOP.format(pattern="'test_*.py'", passing=r"'def test_ok():\n    pass\n'")
PYTHON_REWRITER = f"""import subprocess

LOOP = {PYTHON_LOOP!r}
subprocess.Popen(["setsid", "sh", "-c", LOOP], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""
NODE_LOOP = LOOP.format(
    pattern="'*.test.mjs'", passing=r"""'import { test } from "node:test";\ntest("ok", () => {});\n'"""
)
NODE_REWRITER = f"""import {{ spawn }} from "node:child_process";
spawn("sh", ["-c", {json.dumps(NODE_LOOP)}], {{ detached: true, stdio: "ignore" }}).unref();
"""
PYTHON_CHEATS = {
    "copy_project": [f"M=pyproject.toml; {COPY_PROJECT}"],
    "write_env": [
        "python -c \"import site; open(site.getsitepackages()[0] + '/sitecustomize.py', 'w')"
        ".write('import os, sys\\nif any(\\'pytest\\' in a for a in sys.argv): os._exit(0)\\n')\""
    ],
    "rewriter": [f"cat >> days/__init__.py <<'EOF'\n{PYTHON_REWRITER}EOF"],
}
NODE_CHEATS = {
    "copy_project": [f"M=package.json; {COPY_PROJECT}"],
    "write_env": ["printf 'process.exit(0);\\n' > node_modules/semver/index.js"],
    "rewriter": [f"cat >> src/bump.js <<'EOF'\n{NODE_REWRITER}EOF"],
}


def rig(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=900, env=env)


def mined_pack(repo: Path, pack: Path, first: str, second: str, env: dict[str, str]) -> Path:
    """`rig pack new` from `repo`, then the first fix mined at its parent and the second reversed
    on the snapshot; both must be kept."""
    made = rig(env, "pack", "new", str(pack), "--from", str(repo), "--no-example")
    assert made.returncode == 0, made.stdout + made.stderr
    for sha, base in ((first, "parent"), (second, "snapshot")):
        proc = rig(
            env, "task", "mine", str(repo), "--pack", str(pack), "--json", "--commit", sha, "--base", base
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        report = json.loads(proc.stdout)
        assert report["funnel"]["kept"] == 1, report["commits"]
    return pack


def experiment(
    pack: Path, tmp: Path, name: str, cheats: dict[str, list[str]], env: dict[str, str], sandbox: str
) -> dict[tuple[str, str], dict]:
    """`rig run --sandbox SANDBOX` of the scripted harness on every task: the reference solution and
    each cheat once; the records by (condition, task)."""
    conditions = [(name, {"policy": "script", "commands": commands}) for name, commands in cheats.items()]
    if sandbox == "require":
        conditions.insert(0, ("solution", {"policy": "solution"}))
    design = {
        "name": name,
        "pack": str(pack),
        "harness": "scripted",
        "model": "scripted",
        "tasks": "all",
        "repetitions": 1,
        "workers": 2,
        "seed": 3,
        "timeouts": {"agent_s": 120, "stall_s": 60},
        "conditions": [{"name": condition, "harness_options": options} for condition, options in conditions],
    }
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / f"{name}.toml"
    config.write_text(tomli_w.dumps(design))
    results, runs = tmp / "results", tmp / "runs"
    proc = rig(
        {**env, "RIG_RUNS_ROOT": str(runs)},
        "run",
        str(config),
        "--results-root",
        str(results),
        "--sandbox",
        sandbox,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [json.loads(line) for line in (results / name / "runs.jsonl").read_text().splitlines()]
    return {(r["condition"], r["task"]): r for r in records}


def check_sealed(pack: Path, tmp: Path, cheats: dict[str, list[str]], env: dict[str, str]) -> None:
    """Every cheat fails on both tasks with the sandbox required, the solution succeeds; with the
    sandbox off and a stray copy of the snapshot beside the environment, copying succeeds."""
    records = experiment(pack, tmp / "require", "sealed", cheats, env, "require")
    tasks = {task for _condition, task in records}
    assert len(tasks) == 2
    outcomes = Counter((condition, r["success"]) for (condition, _task), r in records.items())
    assert outcomes == Counter({("solution", True): 2, **{(name, False): 2 for name in cheats}}), {
        key: (r["success"], r.get("hidden"), r.get("check")) for key, r in records.items()
    }
    assert not running(MARKER), "the rewriter outlived the runs"
    # No copy of the project is readable from inside: the environment holds none.
    envs = Path(env["RIG_ENV_DIR"])
    (built,) = [p for p in envs.iterdir() if (p / ".rig-env.json").is_file()]
    stray = envs / "stray-copy"
    shutil.copytree(pack / "fixture", stray)
    try:
        unsealed = experiment(
            pack, tmp / "off", "unsealed", {"copy_project": cheats["copy_project"]}, env, "off"
        )
    finally:
        shutil.rmtree(stray)
    assert {key: r["success"] for key, r in unsealed.items()} == {("copy_project", t): True for t in tasks}
    assert all(not r["sandbox"]["active"] for r in unsealed.values())
    assert built.is_dir()


@pytest.mark.slow
def test_cheats_fail_on_a_sealed_python_pack(tmp_path: Path) -> None:
    repo, first, second = sealed_python_repo(tmp_path)
    env = python_offline(tmp_path / "envs")
    pack = mined_pack(repo, tmp_path / "pack", first, second, env)
    check_sealed(pack, tmp_path, PYTHON_CHEATS, env)


@pytest.mark.slow
def test_cheats_fail_on_a_sealed_node_pack_and_the_probe_names_a_planted_copy(tmp_path: Path) -> None:
    repo, first, second = sealed_node_repo(tmp_path, DATA / "node_pack" / "fixture")
    env = node_offline(tmp_path / "envs")
    pack = mined_pack(repo, tmp_path / "pack", first, second, env)
    check_sealed(pack, tmp_path, NODE_CHEATS, env)
    # A copy of the snapshot (both fixes, and their tests) planted where an agent can read it: the
    # harness CLIs' cache, which every sandbox shows.
    cache = tmp_path / "harness-cache"
    shutil.copytree(pack / "fixture", cache / "stray")
    proc = rig({**env, "RIG_HARNESS_CACHE": str(cache)}, "calibrate", "--pack", str(pack), "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    leaks = [item for item in json.loads(proc.stdout)["items"] if item["kind"] == "leak"]
    assert len(leaks) == 2 and not any(item["passed"] for item in leaks), leaks
    planted = (cache / "stray" / "src" / "bump.js", cache / "stray" / "test" / "bump.test.mjs")
    named = {item["task"]: item["reason"].split(" holds ")[0] for item in leaks}
    assert set(named.values()) <= {f"an agent can read its answer: {path}" for path in planted}, named


def test_the_probe_names_a_copy_of_an_answer_and_not_of_a_starting_tree(tmp_path: Path) -> None:
    pack = load_pack(REPO_ROOT)
    tasks = load_tasks(pack)
    readable = tmp_path / "readable"
    task = next(t for t in tasks if t.id == "t1_fix_pagination")
    # A copy of the task's starting tree (the fixture with its setup, which puts the bug back) is
    # no leak; the fixture itself holds the built-in tasks' fixes.
    shutil.copytree(pack.fixture_dir, readable / "start")
    subprocess.run(["git", "apply", str(task.setup_patch)], cwd=readable / "start", check=True)
    clean = probe([task], lambda _task: [readable], [])
    assert clean[task.id].passed, clean[task.id].reason
    shutil.copytree(pack.fixture_dir, readable / "fixture")
    found = probe([task], lambda _task: [readable], [])
    assert f"{readable / 'fixture' / 'taskapp' / 'utils' / 'pagination.py'} holds" in found[task.id].reason
    shutil.rmtree(readable)
    readable.mkdir()
    # A task's hidden test, and a file the reference solution writes, copied anywhere readable.
    hidden = next(p for p in task.hidden_dir.rglob("*.py"))
    (readable / "hidden-copy").mkdir()
    shutil.copy(hidden, readable / "hidden-copy" / hidden.name)
    found = probe([task], lambda _task: [readable], [])
    assert not found[task.id].passed
    assert (
        f"an agent can read its answer: {readable / 'hidden-copy' / hidden.name} holds"
        in found[task.id].reason
    )
    work = tmp_path / "work"
    shutil.copytree(pack.fixture_dir, work)
    for patch in (task.setup_patch, task.solution_patch):
        subprocess.run(["git", "apply", str(patch)], cwd=work, check=True)
    changed = [line[6:] for line in task.solution_patch.read_text().splitlines() if line.startswith("+++ b/")]
    solved = work / changed[0]
    (readable / "site-packages" / "taskapp").mkdir(parents=True)
    shutil.copy(solved, readable / "site-packages" / "taskapp" / solved.name)
    found = probe([task], lambda _task: [readable], [readable / "hidden-copy"])
    assert not found[task.id].passed
    assert f"{readable / 'site-packages' / 'taskapp' / solved.name} holds" in found[task.id].reason
    # Not looked through: folders the sandbox hides again.
    pruned = probe([task], lambda _task: [readable], [readable / "hidden-copy", readable / "site-packages"])
    assert pruned[task.id].passed, pruned[task.id].reason


def test_a_fixs_change_to_the_projects_tooling_is_no_answer(tmp_path: Path) -> None:
    pack = load_pack(REPO_ROOT)
    tasks_dir, hidden_dir = tmp_path / "tasks", tmp_path / "hidden"
    shutil.copytree(pack.tasks_dir / "t1_fix_pagination", tasks_dir / "t1_fix_pagination")
    shutil.copytree(pack.hidden_dir / "t1_fix_pagination", hidden_dir / "t1_fix_pagination")
    workflow = "      - uses: actions/checkout@v4\n      - uses: actions/setup-python@v5\n"
    with (tasks_dir / "t1_fix_pagination" / "solution.patch").open("a") as patch:
        name = ".github/workflows/ci.yml"
        added = "".join(f"+{line}" for line in workflow.splitlines(True))
        patch.write(f"diff --git a/{name} b/{name}\n--- a/{name}\n+++ b/{name}\n@@ -1,2 +1,2 @@\n{added}")
    (task,) = load_tasks(pack, ["t1_fix_pagination"], tasks_dir, hidden_dir)
    # Another project's CI file, with the same two lines, readable by the agent.
    other = tmp_path / "readable" / "vendored" / ".github" / "workflows"
    other.mkdir(parents=True)
    (other / "ci.yml").write_text(f"jobs:\n  test:\n    steps:\n{workflow}")
    found = probe([task], lambda _task: [tmp_path / "readable"], [])
    assert found[task.id].passed, found[task.id].reason


def test_a_folder_hidden_inside_a_shown_one_is_hidden_again(tmp_path: Path) -> None:
    """An installed rig's venv is shown to the agent, and the packs it ships (their solutions and
    hidden tests) lie inside it; a shown folder under /tmp (a fresh folder in the sandbox) is bound."""
    home, venv = tmp_path / "home", tmp_path / "home" / "venv"
    shipped = venv / "lib" / "site-packages" / "rig" / "shipped"
    shipped.mkdir(parents=True)
    box = Sandbox(Path("/usr/bin/bwrap"), hidden=(home, shipped), exposed=(venv,))
    args = box.wrap(["true"], tmp_path, writable=[], read_only=[])
    mounts = [(args[i], args[i + 1]) for i in range(len(args) - 1) if args[i] in ("--tmpfs", "--ro-bind")]
    assert mounts.index(("--tmpfs", str(home))) < mounts.index(("--ro-bind", str(venv)))
    assert mounts.index(("--ro-bind", str(venv))) < mounts.index(("--tmpfs", str(shipped)))
    assert [m for m in mounts if m[1] == str(shipped)] == [("--tmpfs", str(shipped))]
    # Shown anywhere else, it is bound all the same (/tmp is a fresh folder in the sandbox).
    alone = Sandbox(Path("/usr/bin/bwrap"), hidden=(), exposed=(venv,)).wrap(["true"], tmp_path, [], [])
    assert str(venv) in alone

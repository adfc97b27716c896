"""Proves the notes-js pack the way `rig calibrate` proves the built-in one, without rig's engine.

The clean fixture passes its gate (`node scripts/check.mjs --json`, which `npm run check` runs);
each task's baseline (setup.patch) fails exactly the gate stages and hidden tests its task.toml
declares; each reference solution passes the gate and every hidden test; each decoy fails exactly
where declared; the pack folder is byte-identical afterwards. Every item runs in its own copy of
the fixture, two at a time (the gate and the hidden tests are node processes).

Hidden test ids are `<suite>::<test>`: node's junit reporter (Node 20) writes classname="test" for
every testcase and never the file, so each hidden test file wraps its tests in one top-level
describe() named after the file's stem (`pagination_hidden.test.mjs` -> "pagination_hidden").
"""

import hashlib
import json
import os
import shutil
import subprocess
import tomllib
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACK = Path(__file__).resolve().parents[1] / "packs" / "notes-js"
FIXTURE = PACK / "fixture"
TASKS = PACK / "tasks"
HIDDEN = PACK / "hidden_tests"
HIDDEN_DEST = "_hidden_tests"
HIDDEN_SUFFIX = ".test.mjs"
TIMEOUT_S = 120
WORKERS = 2


@dataclass
class Item:
    name: str
    kind: str  # clean, baseline, solution, decoy
    task: str | None = None
    patches: list[Path] = field(default_factory=list)
    fails_stages: list[str] = field(default_factory=list)
    fails_hidden: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    gate_exit: int
    failed_stages: list[str]
    hidden: dict[str, str] | None  # test id -> "passed" | "failed" | "skipped"
    problems: list[str]  # inconsistencies in the evidence itself


def _task_specs() -> dict[str, dict]:
    specs = {}
    for toml in sorted(TASKS.glob("*/task.toml")):
        specs[toml.parent.name] = tomllib.loads(toml.read_text(encoding="utf-8"))
    return specs


def plan() -> list[Item]:
    """The clean fixture, then per task: baseline, reference solution, each decoy."""
    items = [Item("clean fixture", "clean")]
    for task_id, spec in _task_specs().items():
        task_dir = TASKS / task_id
        setup = task_dir / "setup.patch"
        base = spec["baseline"]
        items.append(
            Item(
                f"{task_id} baseline",
                "baseline",
                task_id,
                [setup],
                base["fails_stages"],
                base["fails_hidden"],
            )
        )
        items.append(Item(f"{task_id} solution", "solution", task_id, [setup, task_dir / "solution.patch"]))
        for name, decoy in sorted(spec["decoys"].items()):
            items.append(
                Item(
                    f"{task_id} decoy {name}",
                    "decoy",
                    task_id,
                    [setup, task_dir / "decoys" / f"{name}.patch"],
                    decoy["fails_stages"],
                    decoy["fails_hidden"],
                )
            )
    return items


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NODE_", "npm_"))}
    env["NO_COLOR"] = "1"
    return env


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL
    )


def _apply(work: Path, patch: Path) -> None:
    if patch.stat().st_size == 0:
        return
    env = {**_env(), "GIT_CEILING_DIRECTORIES": str(work.parent)}
    proc = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", str(patch)], cwd=work, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, f"{patch.relative_to(PACK)} does not apply: {proc.stderr.strip()}"


def run_gate(work: Path) -> tuple[int, list[str], list[str]]:
    """(exit code, failed stages, problems with the report) of `node scripts/check.mjs --json`."""
    proc = _run(["node", "scripts/check.mjs", "--json"], work)
    if len(proc.stdout.strip().splitlines()) != 1:
        return proc.returncode, ["<crash>"], [f"gate --json must print one line, got {proc.stdout[-300:]!r}"]
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return proc.returncode, ["<crash>"], [f"gate printed no JSON: {proc.stderr.strip()[-300:]}"]
    problems = []
    if set(report) != {"ok", "failed", "results"}:
        problems.append(f"gate report keys {sorted(report)}")
    if report["ok"] != (proc.returncode == 0) or report["ok"] == bool(report["failed"]):
        problems.append(f"gate report ok={report['ok']} contradicts exit {proc.returncode}")
    if report["failed"] != [name for name, found in report["results"].items() if found]:
        problems.append("gate report: failed does not list exactly the stages with problems")
    return proc.returncode, report["failed"], problems


def junit_ids(junit: Path) -> dict[str, str]:
    """Test id -> state from node's junit report: `<top-level suite>::<test>`.

    A file that fails before its tests run appears as a top-level testcase named by its path;
    its id is the file's stem.
    """
    states: dict[str, str] = {}

    def state(case: ET.Element) -> str:
        tags = {child.tag for child in case}
        return "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"

    root = ET.parse(junit).getroot()
    for node in root:
        if node.tag == "testcase":
            name = Path(node.get("name", "")).name.removesuffix(HIDDEN_SUFFIX)
            states[name] = state(node)
        elif node.tag == "testsuite":
            for case in node.iter("testcase"):
                states[f"{node.get('name')}::{case.get('name')}"] = state(case)
    return states


def run_hidden(work: Path, task_id: str, junit: Path) -> tuple[dict[str, str], list[str]]:
    dest = work / HIDDEN_DEST
    shutil.copytree(HIDDEN / task_id, dest)
    files = sorted(str(p.relative_to(work)) for p in dest.glob(f"*{HIDDEN_SUFFIX}"))
    args = ["node", "--test", "--test-reporter=junit", f"--test-reporter-destination={junit}", *files]
    proc = _run(args, work)
    if not junit.exists():
        return {}, [f"no junit report (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"]
    states = junit_ids(junit)
    problems = []
    if not states:
        problems.append("hidden run reported no tests")
    if (proc.returncode == 0) != all(s == "passed" for s in states.values()):
        problems.append(f"node --test exit {proc.returncode} contradicts its junit report")
    return states, problems


def run_item(item: Item, scratch: Path) -> Outcome:
    work = scratch / "work"
    shutil.copytree(FIXTURE, work, symlinks=True)
    subprocess.run(["git", "init", "-q"], cwd=work, check=True, capture_output=True)
    for patch in item.patches:
        _apply(work, patch)
    exit_code, stages, problems = run_gate(work)
    hidden = None
    if item.task is not None:
        hidden, hidden_problems = run_hidden(work, item.task, scratch / "junit.xml")
        problems += hidden_problems
    return Outcome(exit_code, stages, hidden, problems)


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


ITEMS = plan()


@pytest.fixture(scope="module")
def proof(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Outcome], bool]:
    """Every item's outcome, and whether the pack folder stayed byte-identical meanwhile."""
    before = tree_digest(PACK)
    root = tmp_path_factory.mktemp("notes-js")
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {item.name: pool.submit(run_item, item, root / f"{i:02d}") for i, item in enumerate(ITEMS)}
        results = {name: future.result() for name, future in futures.items()}
    return results, tree_digest(PACK) == before


def test_pack_layout() -> None:
    """Every task has its patches, at least two decoys and hidden tests, like rig/tasks.py asks."""
    for task_id, spec in _task_specs().items():
        task_dir = TASKS / task_id
        assert spec["id"] == task_id
        assert {"id", "hypothesis", "prompt", "timeout_s", "baseline", "decoys"} <= set(spec)
        assert (task_dir / "setup.patch").is_file() and (task_dir / "solution.patch").is_file()
        assert {p.stem for p in (task_dir / "decoys").glob("*.patch")} == set(spec["decoys"])
        assert len(spec["decoys"]) >= 2 and all(d["reason"] for d in spec["decoys"].values())
        assert list((HIDDEN / task_id).glob(f"*{HIDDEN_SUFFIX}")), f"{task_id} has no hidden tests"
    assert len(_task_specs()) == 5
    skill = (TASKS / "t5_migration" / "skill" / "SKILL.md").read_text(encoding="utf-8")
    assert skill.startswith("---\nname: ") and "\ndescription: " in skill.split("\n---\n", 1)[0]


@pytest.mark.slow
@pytest.mark.parametrize("item", ITEMS, ids=[item.name for item in ITEMS])
def test_item(item: Item, proof: tuple[dict[str, Outcome], bool]) -> None:
    got = proof[0][item.name]
    assert not got.problems, got.problems
    if item.kind == "clean":
        assert got.gate_exit == 0 and got.failed_stages == [], f"clean fixture fails {got.failed_stages}"
        return
    failed_hidden = sorted(test for test, state in (got.hidden or {}).items() if state != "passed")
    # Every id is <file stem>::<test>: the suite names match the hidden files.
    stems = {p.name.removesuffix(HIDDEN_SUFFIX) for p in (HIDDEN / item.task).glob(f"*{HIDDEN_SUFFIX}")}
    assert {test.split("::", 1)[0] for test in got.hidden} <= stems, sorted(got.hidden)
    if item.kind == "solution":
        assert got.failed_stages == [] and failed_hidden == [], (got.failed_stages, failed_hidden)
        return
    assert got.failed_stages or failed_hidden, f"{item.name} passes: the oracle has no teeth for it"
    assert sorted(got.failed_stages) == sorted(item.fails_stages), got.failed_stages
    assert failed_hidden == sorted(item.fails_hidden), failed_hidden
    # Declared ids must exist, or a typo would pass as "not failing".
    assert set(item.fails_hidden) <= set(got.hidden), sorted(set(item.fails_hidden) - set(got.hidden))


@pytest.mark.slow
def test_pack_unchanged(proof: tuple[dict[str, Outcome], bool]) -> None:
    assert proof[1], "the pack folder changed while it was being proved"


@pytest.mark.slow
def test_npm_run_check_is_the_gate(tmp_path: Path) -> None:
    """`npm run check -- --json` is the command the pack declares; it runs the same gate."""
    work = shutil.copytree(FIXTURE, tmp_path / "work")
    env = {**_env(), "npm_config_update_notifier": "false", "npm_config_fund": "false"}
    proc = subprocess.run(
        ["npm", "run", "--silent", "check", "--", "--json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["ok"] is True

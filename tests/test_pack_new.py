"""`rig pack new` scaffolds a pack from a real git repository, through the real CLI.

The scaffold loads as a pack with its example task, its runner kind and gate are the repository's,
its fixture holds exactly the tracked files at HEAD (no untracked file, no .git), the guessed gate
passes on the clean fixture, and a refusal is one line, exit 2, with nothing written.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rig.packs.manifest import load_pack
from rig.packs.tasks import load_tasks
from rig.schema import GateSpec
from rig.verify.checks import run_check
from rig.workspace.build import copy_fixture

RIG = str(Path(sys.executable).with_name("rig"))
NOTES_FIXTURE = Path(__file__).resolve().parents[1] / "packs" / "notes-js" / "fixture"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CEILING_DIRECTORIES": str(repo.parent)}
    ident = ["-c", "user.name=rig", "-c", "user.email=rig@example.invalid", "-c", "commit.gpgsign=false"]
    done = subprocess.run(
        ["git", *ident, *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def make_repo(root: Path, files: dict[str, str]) -> Path:
    """A git repository at `root` with `files` committed."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


def rig(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The ceiling keeps git from finding a repository around the test's folders.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(cwd.parent)}
    return subprocess.run([RIG, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def listing(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def gate_passes(fixture: Path, gate: GateSpec, tmp_path: Path) -> bool:
    """The guessed gate, run by the rig as verification runs it, on a copy of the clean fixture."""
    work = copy_fixture(fixture, tmp_path / "gate-work")
    return run_check(work, tmp_path / "gate-home", gate, timeout=120).ok


PYTHON_PROJECT = {
    "calc/__init__.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    "pyproject.toml": (
        '[project]\nname = "calc"\nversion = "0"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
    ),
    "README.md": "# calc\n",
    "docs/usage.md": "Call add.\n",
    ".gitignore": "build/\n",
    "bin/run": "#!/bin/sh\necho run\n",
}


def test_python_repo(tmp_path: Path) -> None:
    repo = tmp_path / "calc-repo"
    repo.mkdir()
    (repo / "bin").mkdir()
    (repo / "docs-link").symlink_to("docs")
    make_repo(repo, PYTHON_PROJECT)
    (repo / "bin" / "run").chmod(0o755)
    git(repo, "add", "bin/run")
    git(repo, "commit", "-q", "-m", "executable")
    # Neither is tracked: an untracked file and an ignored one stay out of the fixture.
    (repo / "notes.txt").write_text("untracked\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.txt").write_text("ignored\n")

    target = tmp_path / "packs" / "calc"
    target.parent.mkdir()
    done = rig(tmp_path, "pack", "new", str(target), "--from", str(repo), "--no-check")
    assert done.returncode == 0, done.stderr
    assert "runner: pytest" in done.stdout
    steps = [line.strip() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert [step.split(".", 1)[0] for step in steps] == [str(n) for n in range(1, len(steps) + 1)]
    assert steps[-1] == f"{len(steps)}. rig calibrate --pack {target}"

    pack = load_pack(target)
    spec = pack.spec
    assert (spec.name, spec.language, spec.runner.kind) == ("calc-repo", "python", "pytest")
    assert spec.gate.run == ["{python}", "-m", "pytest", "-q"]
    assert spec.gate.report == "exit-code"
    assert (spec.protect.dirs, spec.protect.files) == (["tests"], ["pyproject.toml"])
    assert "docs/*" in spec.docs

    (task,) = load_tasks(pack)
    assert task.id == "example" and len(task.spec.decoys) == 2
    assert [p.name for p in task.hidden_dir.iterdir()] == ["test_example_hidden.py"]

    tracked = set(git(repo, "ls-files").splitlines())
    entries = {p for p in listing(pack.fixture_dir) if not (pack.fixture_dir / p).is_dir()}
    links = {p for p in listing(pack.fixture_dir) if (pack.fixture_dir / p).is_symlink()}
    assert entries | links == tracked | {"AGENTS.md"}
    assert not (pack.fixture_dir / ".git").exists()
    assert os.access(pack.fixture_dir / "bin" / "run", os.X_OK)
    assert os.readlink(pack.fixture_dir / "docs-link") == "docs"
    assert "python -m pytest" in (pack.fixture_dir / "AGENTS.md").read_text()
    assert gate_passes(pack.fixture_dir, spec.gate, tmp_path)


NODE_PROJECT = {
    "package.json": json.dumps(
        {"name": "tally", "type": "module", "scripts": {"test": "node --test"}}, indent=2
    ),
    "src/tally.mjs": "export const tally = (xs) => xs.reduce((a, b) => a + b, 0);\n",
    "src/tally.test.mjs": (
        'import assert from "node:assert/strict";\nimport { test } from "node:test";\n'
        'import { tally } from "./tally.mjs";\n\ntest("sums", () => assert.equal(tally([1, 2]), 3));\n'
    ),
    "AGENTS.md": "# Tally\n\nRun npm test.\n",
}


def test_node_repo_from_the_current_directory(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "tally", NODE_PROJECT)
    (repo / "scratch.mjs").write_text("// untracked\n")
    target = tmp_path / "tally-pack"
    target.mkdir()  # an empty folder is taken as it is

    done = rig(repo, "pack", "new", str(target), "--name", "tally")
    assert done.returncode == 0, done.stderr
    pack = load_pack(target)
    spec = pack.spec
    assert (spec.name, spec.language, spec.runner.kind) == ("tally", "javascript", "node-test")
    assert (spec.gate.command, spec.gate.run) == (["npm", "test"], ["{node}", "--test"])
    assert ["npm", "test"] in spec.runner.test_commands
    assert spec.protect.files == ["package.json", "src/tally.test.mjs"]
    (task,) = load_tasks(pack)
    assert [p.name for p in task.hidden_dir.iterdir()] == ["example_hidden.test.mjs"]
    assert listing(pack.fixture_dir) == {
        "package.json",
        "src",
        "src/tally.mjs",
        "src/tally.test.mjs",
        "AGENTS.md",
    }
    # The repository's own AGENTS.md, not a stub.
    assert (pack.fixture_dir / "AGENTS.md").read_text() == NODE_PROJECT["AGENTS.md"]
    assert gate_passes(pack.fixture_dir, spec.gate, tmp_path)


def test_a_gate_with_a_json_report(tmp_path: Path) -> None:
    repo = tmp_path / "notes"
    shutil.copytree(NOTES_FIXTURE, repo)
    make_repo(repo, {})
    done = rig(tmp_path, "pack", "new", "notes-pack", "--from", "notes")
    assert done.returncode == 0, done.stderr
    gate = load_pack(tmp_path / "notes-pack").spec.gate
    assert (gate.command, gate.run) == (["npm", "run", "check"], ["{node}", "scripts/check.mjs", "--json"])
    assert (gate.report, gate.scripts) == ("json", ["scripts/check.mjs"])


def test_a_repo_without_tests_gets_placeholders_that_load(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "plain", {"Makefile": "check:\n\ttrue\n", "main.c": "int main(void) { return 0; }\n"}
    )
    done = rig(tmp_path, "pack", "new", "plain-pack", "--from", str(repo))
    assert done.returncode == 0, done.stderr
    pack = load_pack(tmp_path / "plain-pack")
    assert pack.spec.runner.kind == "command"
    assert (pack.spec.gate.command, pack.spec.protect.files) == (["make", "check"], ["Makefile"])
    (task,) = load_tasks(pack)
    assert [p.name for p in task.hidden_dir.iterdir()] == ["TODO.md"]


def test_force_replaces_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "plain", {"README.md": "# plain\n"})
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old\n")
    done = rig(tmp_path, "pack", "new", str(target), "--from", str(repo), "--force")
    assert done.returncode == 0, done.stderr
    assert not (target / "old.txt").exists()
    load_pack(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "plain"]


def refused(tmp_path: Path, *args: str, cwd: Path | None = None) -> str:
    """Run a `rig pack new` that must be refused; return its one error line."""
    before = listing(tmp_path)
    done = rig(cwd or tmp_path, "pack", "new", *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert done.stdout == ""
    assert listing(tmp_path) == before
    return lines[0]


def test_refusals_are_one_line_and_write_nothing(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "README.md").write_text("# not a repository\n")
    assert "not a git work tree" in refused(tmp_path, "out", "--from", str(plain))
    assert "not a git work tree" in refused(tmp_path, "out", cwd=plain)

    repo = make_repo(tmp_path / "repo", {"README.md": "# repo\n"})
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine\n")
    assert "--force" in refused(tmp_path, str(full), "--from", str(repo))
    assert "outside" in refused(tmp_path, str(tmp_path), "--from", str(repo), "--force")
    assert "--name" in refused(tmp_path, "out", "--from", str(repo), "--name", "Bad Name")

    (repo / "README.md").write_text("# changed\n")
    assert "commit or stash" in refused(tmp_path, "out", "--from", str(repo))

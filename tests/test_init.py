"""`rig init PACK`: a commented experiment that loads as `rig run` loads it, never over a file."""

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rig.cli import app
from rig.experiment.load import load_experiment
from rig.packs.manifest import load_pack
from rig.paths import PACKS_DIR

NOTES_JS = PACKS_DIR / "notes-js"


def _init(cwd: Path, *args: str):
    cwd.mkdir(parents=True, exist_ok=True)
    here = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(app, ["init", *args])
    finally:
        os.chdir(here)


def test_init_writes_an_ab_on_the_packs_agents_md_that_loads(tmp_path: Path) -> None:
    result = _init(tmp_path, "builtin:notes-js")
    assert result.exit_code == 0, result.output
    written = tmp_path / "notes-js.toml"
    assert result.stdout == f"wrote {written}; run it: rig run notes-js.toml, then rig report notes-js.toml\n"
    experiment = load_experiment(written)
    assert (experiment.harness, experiment.pack, experiment.tasks) == ("pi", "builtin:notes-js", "all")
    assert [c.name for c in experiment.conditions] == ["no_agents_md", "agents_md"]
    assert experiment.conditions[0].remove_files == ["AGENTS.md"]
    assert experiment.provider.kind == "mock"
    # The comments say where every field is documented and list the pack's tasks.
    text = written.read_text()
    assert "docs/experiments.md" in text and '"t1_fix_pagination"' in text


def test_a_pack_folder_is_named_relative_to_the_experiment_file(tmp_path: Path) -> None:
    result = _init(tmp_path / "work", str(NOTES_JS), "--out", "studies/mine.toml", "--harness", "codex")
    assert result.exit_code == 0, result.output
    experiment = load_experiment(tmp_path / "work" / "studies" / "mine.toml")
    assert experiment.harness == "codex"
    assert load_pack(experiment.pack).root == NOTES_JS.resolve()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["builtin:nope"], "error: no built-in pack 'builtin:nope'"),
        (["builtin:taskapp", "--harness", "nope"], "error: unknown harness 'nope'; use one of"),
        (["no/such/folder"], "error: "),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    result = _init(tmp_path, *args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_is_never_replaced(tmp_path: Path) -> None:
    (tmp_path / "taskapp.toml").write_text("mine\n")
    result = _init(tmp_path, "builtin:taskapp")
    assert result.exit_code == 2
    assert "taskapp.toml exists; remove it or give another file with --out" in result.stderr
    assert (tmp_path / "taskapp.toml").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taskapp.toml"]

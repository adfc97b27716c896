"""Where an experiment's pack and results are found, wherever its file lives: in the checkout's
experiments/ or anywhere else, as for a rig installed like any Python tool."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harnesses.cli_harness import install_extension, install_skill
from rig.experiment.load import ExperimentError, load_experiment
from rig.packs.manifest import BUILTIN_PACK, PackError, load_pack
from rig.paths import REPO_ROOT, RESULTS_DIR, RESULTS_ROOT_ENV, results_root

NOTES_JS = REPO_ROOT / "packs" / "notes-js"
RIG = str(Path(sys.executable).with_name("rig"))


def write_experiment(folder: Path, pack: str | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "exp.toml"
    named = f'pack = "{pack}"\n' if pack is not None else ""
    conditions = '[[conditions]]\nname = "sol"\nharness_options = { policy = "solution" }\n'
    path.write_text(f'harness = "scripted"\n{named}{conditions}')
    return path


def test_the_results_root_is_the_option_then_the_variable_then_where_the_experiment_lives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "exp.toml"
    in_checkout = REPO_ROOT / "experiments" / "x.toml"
    monkeypatch.delenv(RESULTS_ROOT_ENV, raising=False)
    assert results_root(outside) == Path("rig-results")
    assert results_root(in_checkout) == RESULTS_DIR
    assert results_root(REPO_ROOT / "experiments" / "sub" / "x.toml") == RESULTS_DIR
    assert results_root(REPO_ROOT / "tests" / "data" / "x.toml") == Path("rig-results")
    monkeypatch.setenv(RESULTS_ROOT_ENV, "")
    assert results_root(outside) == Path("rig-results"), "an empty variable is unset"
    monkeypatch.setenv(RESULTS_ROOT_ENV, str(tmp_path / "env"))
    assert results_root(outside) == results_root(in_checkout) == tmp_path / "env"
    assert results_root(in_checkout, tmp_path / "given") == tmp_path / "given"


def test_an_experiment_outside_the_checkout_names_a_shipped_pack(tmp_path: Path) -> None:
    experiment = load_experiment(write_experiment(tmp_path, "builtin:notes-js"))
    assert experiment.pack == "builtin:notes-js", "the design keeps the name, portable"
    assert load_pack(experiment.pack) == load_pack(NOTES_JS)
    assert load_pack("builtin:taskapp") == load_pack(None) == load_pack(BUILTIN_PACK)
    assert load_experiment(write_experiment(tmp_path / "none", None)).pack is None


def test_a_relative_pack_is_the_experiment_files_then_the_checkouts(tmp_path: Path) -> None:
    copy = tmp_path / "packs" / "notes"
    shutil.copytree(NOTES_JS, copy)
    beside = load_experiment(write_experiment(tmp_path / "exp", "../packs/notes"))
    assert beside.pack == str(copy.resolve())
    assert load_pack(beside.pack).root == copy.resolve()
    # Not beside the file, but the checkout's: as the experiments in experiments/ name it.
    checkout = load_experiment(write_experiment(tmp_path / "other", "packs/notes-js"))
    assert checkout.pack == "packs/notes-js"
    assert load_pack(checkout.pack).root == NOTES_JS


def test_a_pack_beside_an_experiment_at_home_is_stored_without_the_home_folders_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home" / "zq_fake_user"
    shutil.copytree(NOTES_JS, home / "work" / "pack")
    monkeypatch.setenv("HOME", str(home))
    experiment = load_experiment(write_experiment(home / "work", "pack"))
    # The design (experiment.json, the report) shows no user name; the same user loads it back.
    assert experiment.pack == "~/work/pack"
    assert "zq_fake_user" not in experiment.model_dump_json()
    assert load_pack(experiment.pack).root == (home / "work" / "pack").resolve()
    # A pack inside the rig's checkout, named relative to the file: relative to the checkout, as
    # experiments there name their packs.
    folder = tmp_path / "exp2"
    inside = load_experiment(write_experiment(folder, os.path.relpath(NOTES_JS, folder)))
    assert inside.pack == "packs/notes-js"


@pytest.mark.parametrize(
    ("pack", "message"),
    [
        (
            "builtin:nope",
            "pack: no built-in pack 'builtin:nope'; use one of builtin:taskapp, builtin:notes-js",
        ),
        ("gone", "pack: no pack folder {tmp}/gone; give a folder relative to the experiment file"),
    ],
    ids=["unknown-builtin", "missing-folder"],
)
def test_a_pack_that_is_not_there_is_one_line_naming_the_choices(
    tmp_path: Path, pack: str, message: str
) -> None:
    path = write_experiment(tmp_path, pack)
    with pytest.raises(ExperimentError) as caught:
        load_experiment(path)
    assert str(caught.value).startswith(f"{path}: " + message.format(tmp=tmp_path))
    assert "builtin:notes-js" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(PackError, match="no built-in pack 'builtin:nope'"):
        load_pack("builtin:nope")


def test_a_commands_pack_option_takes_a_builtin_name() -> None:
    done = subprocess.run([RIG, "calibrate", "--pack", "builtin:nope"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: no built-in pack 'builtin:nope'; use one of builtin:taskapp, builtin:notes-js, "
        "or a pack folder"
    ]


def test_skills_and_extensions_are_found_as_the_pack_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home" / "zq_fake_user"
    work = home / "work"
    shutil.copytree(REPO_ROOT / "tasks" / "t5_migration" / "skill", work / "skills" / "migrate")
    (work / "gate.mjs").parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO_ROOT / "extensions" / "delete_gate.mjs", work / "gate.mjs")
    monkeypatch.setenv("HOME", str(home))
    path = work / "exp.toml"
    path.write_text(
        'harness = "pi"\nmodel = "mock"\nprovider = { kind = "mock" }\n'
        '[[conditions]]\nname = "mine"\nskills = ["skills/migrate"]\nextensions = ["gate.mjs"]\n'
        '[[conditions]]\nname = "shipped"\nskills = ["tasks/t5_migration/skill"]\n'
        'extensions = ["extensions/delete_gate.mjs"]\n'
    )
    mine, shipped = load_experiment(path).conditions
    # Beside the file, stored without the home folder's path; the rig's own, as written.
    assert (mine.skills, mine.extensions) == (["~/work/skills/migrate"], ["~/work/gate.mjs"])
    assert (shipped.skills, shipped.extensions) == (
        ["tasks/t5_migration/skill"],
        ["extensions/delete_gate.mjs"],
    )
    installed = install_skill(mine.skills[0], tmp_path / "installed")
    assert (installed / "SKILL.md").read_bytes() == (work / "skills" / "migrate" / "SKILL.md").read_bytes()
    assert (
        install_extension(mine.extensions[0], tmp_path / "ext").read_bytes()
        == (work / "gate.mjs").read_bytes()
    )

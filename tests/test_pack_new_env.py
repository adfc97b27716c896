"""`rig pack new` infers a Python project's `[environment]` from a real git repository's files.

Each test commits a small repository, scaffolds a pack from it through the real CLI and checks the
loaded pack's `spec.environment` and the printed summary: extras, dependency groups, requirements
files, tox.ini, a version taken from git, uv.lock, the steps of a GitHub workflow before its test
step, and `--setup` / `--build`. A repository that is no Python project gets no `[environment]`.
"""

import shutil
import subprocess
import textwrap
from importlib.metadata import version
from pathlib import Path

from env_pack import PROJECT, RIG, offline
from test_pack_new import make_repo, rig

from rig.packs.manifest import load_pack
from rig.schema import EnvironmentSpec

TEST_FILE = {"tests/test_calc.py": "def test_one():\n    assert True\n"}


def pyproject(body: str = "") -> str:
    return '[project]\nname = "calc"\nversion = "0"\n' + textwrap.dedent(body)


def scaffold(tmp_path: Path, files: dict[str, str], *args: str) -> tuple[EnvironmentSpec | None, str, str]:
    """A pack scaffolded from a repository holding `files`: its environment, summary and pack.toml."""
    repo = make_repo(tmp_path / "calc", files)
    done = rig(tmp_path, "pack", "new", "pack", "--from", str(repo), "--no-check", *args)
    assert done.returncode == 0, done.stderr
    manifest = (tmp_path / "pack" / "pack.toml").read_text()
    return load_pack(tmp_path / "pack").spec.environment, done.stdout, manifest


def notes(summary: str) -> list[str]:
    return [line.removeprefix("environment note: ") for line in summary.splitlines() if "note:" in line]


def test_test_extras_are_taken_and_dev_only_without_them(tmp_path: Path) -> None:
    extras = """
        [project.optional-dependencies]
        docs = ["sphinx"]
        dev = ["black"]
        tests = ["pytest"]
    """
    env, summary, manifest = scaffold(tmp_path / "a", {"pyproject.toml": pyproject(extras), **TEST_FILE})
    assert env is not None
    assert (env.project, env.extras, env.groups, env.requirements) == (True, ["tests"], [], [])
    assert 'environment: extras = ["tests"] (pyproject.toml [project.optional-dependencies] tests)' in summary
    assert "# pyproject.toml [project.optional-dependencies] tests." in manifest
    assert not any("pytest" in note for note in notes(summary))

    dev_only = '[project.optional-dependencies]\ndev = ["pytest"]\ndocs = ["sphinx"]\n'
    env, _, _ = scaffold(tmp_path / "b", {"pyproject.toml": pyproject(dev_only), **TEST_FILE})
    assert env is not None and env.extras == ["dev"]


def test_dependency_groups(tmp_path: Path) -> None:
    groups = """
        [dependency-groups]
        lint = ["ruff"]
        testing = [{include-group = "base"}]
        base = ["pytest>=8"]
    """
    env, summary, _ = scaffold(tmp_path, {"pyproject.toml": pyproject(groups), **TEST_FILE})
    assert env is not None and (env.extras, env.groups) == ([], ["testing"])
    assert "environment: groups = " in summary
    # pytest comes through the included group: no note asks for it.
    assert not any("pytest" in note for note in notes(summary))


def test_requirements_files_test_ones_first(tmp_path: Path) -> None:
    files = {
        "setup.py": "from setuptools import setup\n\nsetup(name='calc')\n",
        "requirements/tests.txt": "-r ../requirements.txt\nfreezegun\n",
        "requirements.txt": "attrs\n",
        "requirements-dev.txt": "pytest\n",
        **TEST_FILE,
    }
    env, summary, _ = scaffold(tmp_path, files)
    assert env is not None
    assert (env.project, env.requirements) == (True, ["requirements/tests.txt"])
    assert "setup.py: the project is installed editable" in summary
    # requirements-dev.txt, which lists pytest, is not taken beside a test one: rig's pinned pytest is.
    assert env.setup == [f"uv pip install --python bin/python pytest=={version('pytest')}"]
    assert "pytest runs the tests and no source above lists it" in summary


def test_tox_deps_setenv_and_extras(tmp_path: Path) -> None:
    tox = """\
        [tox]
        envlist = py311

        [testenv]
        deps =
            -r{toxinidir}/ci/reqs.txt
            hypothesis>=6
            py311: pytest-cov
        setenv =
            TZ = UTC
            DATA = {toxinidir}/data
        extras = full
        commands = pytest
    """
    files = {
        "pyproject.toml": pyproject('[project.optional-dependencies]\nfull = ["lxml"]\n'),
        "tox.ini": textwrap.dedent(tox),
        "ci/reqs.txt": "pytest\n",
        **TEST_FILE,
    }
    env, summary, _ = scaffold(tmp_path, files)
    assert env is not None
    assert (env.requirements, env.extras, env.env) == (["ci/reqs.txt"], ["full"], {"TZ": "UTC"})
    (plain,) = [note for note in notes(summary) if "deps also lists" in note]
    assert "hypothesis>=6, pytest-cov" in plain and "uv pip install --python bin/python" in plain
    assert any("DATA = {toxinidir}/data" in note for note in notes(summary))


def test_a_version_from_git_and_the_file_it_generates(tmp_path: Path) -> None:
    hatch = """\
        [build-system]
        requires = ["hatchling", "hatch-vcs"]
        build-backend = "hatchling.build"

        [project]
        name = "calc"
        dynamic = ["version"]

        [tool.hatch.version]
        source = "vcs"

        [tool.hatch.build.hooks.vcs]
        version-file = "src/calc/_version.py"
    """
    files = {"pyproject.toml": textwrap.dedent(hatch), "src/calc/__init__.py": "", **TEST_FILE}
    env, summary, manifest = scaffold(tmp_path, files)
    assert env is not None and env.pretend_version is True
    assert "\npretend_version = true\n" in manifest
    (line,) = [line for line in summary.splitlines() if line.startswith("environment: pretend_version")]
    assert "hatch-vcs: the version comes from git; rig sets the pretend version" in line
    assert "src/calc/_version.py (version-file) is generated at install" in line


def test_a_uv_lock_is_the_lock_and_leaves_requirements_out(tmp_path: Path) -> None:
    files = {
        "pyproject.toml": pyproject('[dependency-groups]\ndev = ["ruff"]\n'),
        "uv.lock": "version = 1\n",
        "requirements-test.txt": "pytest\n",
        **TEST_FILE,
    }
    env, summary, _ = scaffold(tmp_path, files)
    assert env is not None
    assert (env.lock, env.requirements, env.groups) == ("uv.lock", [], ["dev"])
    assert any("not used beside lock = 'uv.lock'" in note for note in notes(summary))
    assert env.setup == [f"uv pip install --python bin/python pytest=={version('pytest')}"]


def workflow(*steps: str) -> str:
    """A workflow whose job `tests` runs `steps`, then pytest, then one more step."""
    body = "".join(textwrap.indent(textwrap.dedent(step), " " * 6) for step in steps)
    return (
        "on: [push]\njobs:\n  lint:\n    runs-on: ubuntu-latest\n    steps:\n      - run: make lint-setup\n"
        "  tests:\n    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@v4\n"
        f"{body}      - run: python -m pytest -q\n      - run: python scripts/after_tests.py\n"
    )


def scaffold_workflow(tmp_path: Path, *steps: str) -> tuple[EnvironmentSpec, str]:
    # pytest in a test extra: the setup lines are then the workflow's alone.
    test_extra = '[project.optional-dependencies]\ntest = ["pytest"]\n'
    files = {
        "pyproject.toml": pyproject(test_extra),
        ".github/workflows/ci.yml": workflow(*steps),
        **TEST_FILE,
    }
    env, summary, _ = scaffold(tmp_path, files)
    assert env is not None
    return env, summary


def test_a_workflow_step_that_derives_files_is_a_build_line(tmp_path: Path) -> None:
    env, summary = scaffold_workflow(
        tmp_path,
        """\
        - name: Compile translations
          run: |
            msgfmt -o calc/locale/de.mo calc/locale/de.po
        - name: Fetch data
          run: python scripts/fetch.py --small
        """,
    )
    assert env.build == ["msgfmt -o calc/locale/de.mo calc/locale/de.po"]
    # Only the test job's steps before its test step: neither the lint job's nor the one after.
    assert env.setup == ["python scripts/fetch.py --small"]
    assert "ci.yml job tests, step 'Compile translations': derives files" in summary


def test_a_workflow_install_of_the_project_is_left_to_the_fields(tmp_path: Path) -> None:
    env, summary = scaffold_workflow(
        tmp_path,
        """\
        - name: Install
          run: |
            python -m pip install --upgrade pip
            pip install -e .[test] -r requirements.txt
        """,
    )
    assert (env.setup, env.build) == ([], [])
    assert not any("Install" in note for note in notes(summary))


def test_a_workflow_apt_get_step_is_a_needs_note(tmp_path: Path) -> None:
    env, summary = scaffold_workflow(
        tmp_path,
        """\
        - run: |
            sudo apt-get update
            sudo apt-get install -y gettext
        """,
    )
    assert (env.setup, env.build) == ([], [])
    (needs,) = [note for note in notes(summary) if note.startswith("needs")]
    assert needs.startswith("needs gettext (system packages, .github/workflows/ci.yml job tests")


def test_a_workflow_step_for_another_os_is_left_out(tmp_path: Path) -> None:
    env, _ = scaffold_workflow(
        tmp_path,
        """\
        - if: runner.os == 'Windows'
          run: python scripts/windows_only.py
        - if: matrix.os != 'macos-latest'
          run: python scripts/not_on_macos.py
        - run: python scripts/everywhere.py
        """,
    )
    assert env.setup == ["python scripts/everywhere.py"]


def test_a_workflow_step_with_an_expression_is_left_out(tmp_path: Path) -> None:
    env, _ = scaffold_workflow(
        tmp_path,
        """\
        - run: python scripts/prepare.py --python ${{ matrix.python }}
        - run: python scripts/prepare.py
        """,
    )
    assert env.setup == ["python scripts/prepare.py"]


def test_noxfile_and_a_workflow_too_large_are_notes(tmp_path: Path) -> None:
    huge = workflow("- run: python scripts/prepare.py\n") + "#" * 1_000_001 + "\n"
    files = {
        "pyproject.toml": pyproject(),
        "noxfile.py": "import nox\n",
        ".github/workflows/ci.yml": huge,
        **TEST_FILE,
    }
    env, summary, _ = scaffold(tmp_path, files)
    # The huge workflow's step is not read; only rig's own pytest line is there.
    assert env is not None and env.setup == [
        f"uv pip install --python bin/python pytest=={version('pytest')}"
    ]
    assert "noxfile.py: nox sessions are not read; check [environment]" in notes(summary)
    assert any(note.startswith(".github/workflows/ci.yml is over 1 MB") for note in notes(summary))


def test_a_repo_without_python_gets_no_environment(tmp_path: Path) -> None:
    files = {"Makefile": "check:\n\ttrue\n", "main.c": "int main(void) { return 0; }\n"}
    env, summary, manifest = scaffold(tmp_path, files)
    assert env is None
    assert "[environment]" not in manifest and "environment:" not in summary and "env build" not in summary


def test_setup_and_build_options_add_lines(tmp_path: Path) -> None:
    files = {"pyproject.toml": pyproject(), ".github/workflows/ci.yml": workflow("- run: make messages\n")}
    env, summary, _ = scaffold(
        tmp_path / "a",
        {**files, **TEST_FILE},
        "--setup",
        "uv pip install --python bin/python pytest -e project",
        "--build",
        "python gen.py",
        "--build",
        "touch made.txt",
    )
    assert env is not None
    assert env.setup == ["uv pip install --python bin/python pytest -e project"]
    assert env.build == ["make messages", "python gen.py", "touch made.txt"]
    assert "given with --build" in summary
    # The author's setup line installs pytest: rig's own pytest line is gone.
    assert not any("pytest==" in line for line in env.setup) and "no source above lists it" not in summary

    # A repository that is no Python project gets the lines, and nothing to install.
    env, _, _ = scaffold(tmp_path / "b", {"main.c": "int main(void) { return 0; }\n"}, "--build", "make")
    assert env is not None and (env.project, env.build) == (False, ["make"])

    repo = make_repo(tmp_path / "c", {"main.c": "\n"})
    done = rig(tmp_path, "pack", "new", str(tmp_path / "c-pack"), "--from", str(repo), "--setup", " ")
    assert done.returncode == 2 and "--setup: an empty line" in done.stderr
    assert not (tmp_path / "c-pack").exists()


def env_project_repo(where: Path, extra: dict[str, str] | None = None) -> Path:
    """A git repository of tests/data/env_project with a test of its own (and `extra` files)."""
    shutil.copytree(PROJECT, where)
    files = {"tests/test_next_month.py": VISIBLE_TEST, **(extra or {})}
    return make_repo(where, files)


VISIBLE_TEST = """from envproject import next_month_days


def test_next_month_days():
    assert next_month_days(3) == 4
"""


def pack_new_offline(tmp_path: Path, repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`rig pack new` with the check, its environment built offline from build/wheels."""
    env = {**offline(tmp_path / "envs"), "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    return subprocess.run(
        [RIG, "pack", "new", str(tmp_path / "pack"), "--from", str(repo), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_pack_new_builds_the_environment_and_runs_the_gate_before_done(tmp_path: Path) -> None:
    repo = env_project_repo(tmp_path / "envproject")
    done = pack_new_offline(tmp_path, repo)
    assert done.returncode == 0, done.stdout + done.stderr
    spec = load_pack(tmp_path / "pack").spec
    assert spec.environment is not None and spec.environment.extras == ["test"]
    lines = done.stdout.splitlines()
    (built,) = [line for line in lines if line.startswith("environment: built ")]
    (gate,) = [line for line in lines if line.startswith("gate on the clean fixture")]
    assert gate.startswith("gate on the clean fixture, in the environment: passes"), done.stdout
    (path,) = [p for p in (tmp_path / "envs").iterdir() if p.is_dir()]
    assert f"at {path} " in built and (tmp_path / "pack" / "environment.lock.txt").is_file()


def test_pack_new_says_which_key_to_change_when_the_gate_fails(tmp_path: Path) -> None:
    repo = env_project_repo(tmp_path / "envproject")
    done = pack_new_offline(tmp_path, repo, "--build", "no-such-generator-for-rig --all")
    assert done.returncode == 1, done.stdout + done.stderr
    *_, failed, fix = done.stdout.strip().splitlines()
    assert failed.startswith("gate on the clean fixture, in the environment: FAILS at build"), failed
    assert "needs a command this machine lacks" in failed and "no-such-generator-for-rig" in failed
    assert fix.startswith("Change [environment] build in pack.toml, then `rig env build "), fix
    assert (tmp_path / "pack" / "pack.toml").is_file(), "the pack stays written, to be changed"


def test_with_an_environment_the_gate_is_the_runners_own_not_a_makefile_target(tmp_path: Path) -> None:
    files = {
        "pyproject.toml": pyproject('[project.optional-dependencies]\ntest = ["pytest"]\n'),
        "Makefile": "test:\n\t. venv/bin/activate && pytest\n",
        "tests/test_calc.py": "def test_one():\n    assert True\n",
    }
    _, summary, _ = scaffold(tmp_path, files)
    assert "gate: python -m pytest (pytest, run by the [environment]'s interpreter)" in summary, summary


# A test that fails in rig's environment whatever the code (an interpreter difference), with a
# parameter whose id holds the runner's own separator; and one that passes.
OLD_INTERPRETER_TESTS = """import sys

import pytest


@pytest.mark.parametrize("case", ["a::b"])
def test_needs_python_2(case):
    assert sys.version_info < (3, 0), "an old interpreter only"


def test_fine():
    assert True
"""


def test_tests_failing_on_the_clean_fixture_are_known_failures_and_the_pack_is_green(tmp_path: Path) -> None:
    repo = env_project_repo(tmp_path / "envproject", {"tests/test_old.py": OLD_INTERPRETER_TESTS})
    done = pack_new_offline(tmp_path, repo)
    assert done.returncode == 0, done.stdout + done.stderr
    *_, said, passes = done.stdout.strip().splitlines()
    test = "tests/test_old.py::test_needs_python_2[a::b]"
    assert said == (
        f"gate on the clean fixture: 1 of 3 tests fail whatever the code (first: {test}: AssertionError: "
        "an old interpreter only); deselected, listed in pack.toml [gate] known_failures"
    ), done.stdout
    assert passes.startswith("gate on the clean fixture, in the environment: passes ("), passes
    gate = load_pack(tmp_path / "pack").spec.gate
    assert [(k.test, k.error) for k in gate.known_failures] == [
        (test, "AssertionError: an old interpreter only")
    ]
    assert gate.run[-2:] == ["--deselect", test]
    # Mining starts from a gate that passes: it no longer refuses the repository.
    mine = subprocess.run(
        [RIG, "task", "mine", str(repo), "--pack", str(tmp_path / "pack"), "--max", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**offline(tmp_path / "envs"), "GIT_CEILING_DIRECTORIES": str(tmp_path)},
    )
    assert mine.returncode == 0, mine.stdout + mine.stderr


def test_a_gate_most_of_whose_tests_fail_is_not_set_aside(tmp_path: Path) -> None:
    failing = OLD_INTERPRETER_TESTS.replace(
        "def test_fine():\n    assert True", "def test_fine():\n    assert False"
    )
    repo = env_project_repo(tmp_path / "envproject", {"tests/test_old.py": failing})
    done = pack_new_offline(tmp_path, repo)
    assert done.returncode == 1, done.stdout + done.stderr
    *_, aside, failed, _fix = done.stdout.strip().splitlines()
    assert (
        aside == "known failures: not set aside, 2 of 3 tests fail: the gate does not run in this environment"
    )
    assert failed.startswith("gate on the clean fixture, in the environment: FAILS at gate"), failed
    assert load_pack(tmp_path / "pack").spec.gate.known_failures == []


def test_a_workflow_step_of_a_packaging_tool_is_never_a_setup_line(tmp_path: Path) -> None:
    """`poetry config ...` copied as a setup line failed the build with exit 127 where poetry is
    not installed; what `poetry install` installs, rig takes from the project's metadata."""
    env, _summary = scaffold_workflow(
        tmp_path,
        """\
        - name: Configure poetry
          run: |
            poetry config virtualenvs.create false
            poetry install --with test
        - name: Hatch's environment
          run: |
            hatch env create
            python -m venv venv
        - name: Fetch data
          run: python scripts/fetch.py --small
        """,
    )
    assert (env.setup, env.build) == (["python scripts/fetch.py --small"], [])


def test_known_failures_are_read_through_a_projects_colours() -> None:
    """humanize's `addopts = "--color=yes"` colours every line of the summary (captured from it)."""
    from rig.runners.pytest import gate_failures

    output = (
        "\x1b[31mFAILED\x1b[0m tests/test_i18n.py::\x1b[1mTestActivate::test_None_locale\x1b[0m - "
        "FileNotFoundError: [Errno 2] No translation file found for domain: 'humanize'\n"
        "\x1b[31m======= \x1b[31m\x1b[1m1 failed\x1b[0m, \x1b[32m599 passed\x1b[0m, "
        "\x1b[33m23 skipped\x1b[0m\x1b[31m in 2.38s\x1b[0m\x1b[31m =======\x1b[0m\n"
    )
    found = gate_failures(output)
    assert found.failed == [
        (
            "tests/test_i18n.py::TestActivate::test_None_locale",
            "FileNotFoundError: [Errno 2] No translation file found for domain: 'humanize'",
        )
    ]
    assert (found.passed, found.unloaded) == (599, [])

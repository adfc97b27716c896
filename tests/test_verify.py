"""Verification decides by exit codes and junit evidence, on real workspaces.

The red-team tests play an agent whose code runs inside the verifying processes: each plants an
attack in a workspace whose task is still unsolved and shows the outcome stays a failure.
"""

import os
import py_compile
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from builtin_pack import BUILTIN, HIDDEN_TESTS_DIR, TASKS_DIR
from conftest import run_check_json

from rig.schema import HiddenOutcome, Placement, RunnerSpec
from rig.verify.checks import CANARY_MARKER, HIDDEN_DEST, run_check, run_hidden
from rig.verify.judged import judge_hidden
from rig.workspace.build import PatchError, apply_patch, tree_digest


def test_hidden_failures_come_from_junit(taskapp, tmp_path):
    apply_patch(taskapp, TASKS_DIR / "t1_fix_pagination" / "setup.patch")
    outcome = run_hidden(
        taskapp, HIDDEN_TESTS_DIR / "t1_fix_pagination", tmp_path / "j.xml", tmp_path, BUILTIN.spec.runner
    )
    assert not outcome.ok and outcome.exit_code == 1
    assert outcome.collected == 4 and outcome.skipped == []
    assert "test_pagination_hidden::test_exact_multiple_last_page" in outcome.failed


def test_no_tests_collected_is_a_failure(taskapp, tmp_path):
    empty = tmp_path / "empty_hidden"
    empty.mkdir()
    (empty / "helpers.py").write_text("VALUE = 1\n")
    outcome = run_hidden(taskapp, empty, tmp_path / "j.xml", tmp_path, BUILTIN.spec.runner)
    assert not outcome.ok
    assert outcome.exit_code == 5
    assert outcome.failed == ["<no tests collected>"]
    assert outcome.error == "hidden pytest collected no tests"


def test_workspace_conftest_cannot_rig_the_hidden_tests(taskapp, tmp_path):
    """A conftest.py left in the workspace root or pre-placed at the destination is ignored."""
    apply_patch(taskapp, TASKS_DIR / "t1_fix_pagination" / "setup.patch")
    rigging = "import pytest\n\n@pytest.hookimpl(tryfirst=True)\ndef pytest_runtest_call(item):\n    pass\n"
    (taskapp / "conftest.py").write_text(rigging)
    (taskapp / HIDDEN_DEST).mkdir()
    (taskapp / HIDDEN_DEST / "conftest.py").write_text("collect_ignore_glob = ['*']\n")
    outcome = run_hidden(
        taskapp, HIDDEN_TESTS_DIR / "t1_fix_pagination", tmp_path / "j.xml", tmp_path, BUILTIN.spec.runner
    )
    assert not outcome.ok and len(outcome.failed) == 4


def test_check_reports_failed_stages(taskapp, tmp_path):
    apply_patch(taskapp, TASKS_DIR / "t3_fix_check" / "setup.patch")
    outcome = run_check(taskapp, tmp_path, BUILTIN.spec.gate)
    assert outcome.exit_code == 1 and not outcome.ok
    assert outcome.failed == ["ruff", "pytest", "raise_scan", "magic_numbers"]


def test_check_without_a_report_is_a_failure(taskapp, tmp_path):
    (taskapp / "scripts" / "check.py").write_text("import sys\nsys.exit(0)\n")
    outcome = run_check(taskapp, tmp_path, BUILTIN.spec.gate)
    assert not outcome.ok
    assert outcome.error.startswith("the gate printed no JSON report (exit 0)")


def test_check_whose_report_contradicts_its_exit_code_fails(taskapp, tmp_path):
    fake = 'print(\'{"ok": true, "failed": [], "results": {}}\')\nraise SystemExit(1)\n'
    (taskapp / "scripts" / "check.py").write_text(fake)
    outcome = run_check(taskapp, tmp_path, BUILTIN.spec.gate)
    assert not outcome.ok
    assert "contradicts exit 1" in outcome.error


def test_patch_that_does_not_apply_is_named(taskapp):
    shutil.rmtree(taskapp / "taskapp" / "utils")
    with pytest.raises(PatchError, match="setup.patch: does not apply"):
        apply_patch(taskapp, TASKS_DIR / "t1_fix_pagination" / "setup.patch")


# --- red team: an agent's code runs inside the hidden tests' pytest process -------------------

# Forcing code an agent could put at the top of taskapp/__init__.py (imported by the rig's pytest
# through taskapp_testing.plugin before any test runs); each is guarded so check.py still imports.
UNDER_PYTEST = 'import sys\nif "pytest" in sys.modules:\n    import pytest\n'
SKIP_AT_IMPORT = UNDER_PYTEST + '    pytest.skip("x", allow_module_level=True)\n'
IMPORTORSKIP_AT_IMPORT = UNDER_PYTEST + '    pytest.importorskip("no_such_module_x")\n'
FORCE_CALL_AND_REPORT = """import sys
if "pytest" in sys.modules:
    import _pytest.runner

    _real = _pytest.runner.call_and_report

    def _forced(item, when, log=True, **kwds):
        report = _real(item, when, log=False, **kwds)
        report.outcome, report.longrepr = "passed", None
        if log:
            item.ihook.pytest_runtest_logreport(report=report)
        return report

    _pytest.runner.call_and_report = _forced
"""
FORCE_LIVE_HOOK = """import sys
if "pytest" in sys.modules:
    import gc

    import pytest
    from _pytest.config import Config

    class _Force:
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(self, item, call):
            report = yield
            report.outcome, report.longrepr = "passed", None
            return report

    for _obj in gc.get_objects():
        if isinstance(_obj, Config):
            _obj.pluginmanager.register(_Force(), "force")
            break
"""
REWRITE_JUNIT_AT_EXIT = """import sys
if "pytest" in sys.modules:
    import atexit
    import os
    import re

    def _rewrite():
        for arg in sys.argv:
            if arg.startswith("--junitxml="):
                path = arg.split("=", 1)[1]
                with open(path) as f:
                    text = re.sub(r"<failure.*?</failure>", "", f.read(), flags=re.S)
                with open(path, "w") as f:
                    f.write(re.sub(r'failures="[0-9]+"', 'failures="0"', text))
        os._exit(0)

    atexit.register(_rewrite)
"""
# Forces every outcome but the last collected test's, where a single canary named to run last sat.
FORCE_ALL_BUT_LAST = """import sys
if "pytest" in sys.modules:
    import _pytest.runner

    _original = _pytest.runner.call_and_report

    def _forced(item, when, log=True, **kwargs):
        if item is item.session.items[-1]:
            return _original(item, when, log, **kwargs)
        report = _original(item, when, log=False, **kwargs)
        report.outcome, report.longrepr = "passed", None
        if log:
            item.ihook.pytest_runtest_logreport(report=report)
        return report

    _pytest.runner.call_and_report = _forced
"""
EXIT_AT_IMPORT = 'import os\nimport sys\nif "pytest" in sys.modules:\n    os._exit(0)\n'
CANARY_ERROR = r"^the rig's canary test .+: test outcomes were forced or the report was rewritten$"
PAGINATION = ("taskapp", "utils", "pagination.py")


def prepend(path: Path, code: str) -> None:
    """Put code at the top of a module, as an agent's edit would."""
    path.write_text(code + path.read_text())


def in_paginate(workspace: Path, code: str) -> None:
    """Insert code (indented for the function body) at the start of paginate()."""
    path = workspace.joinpath(*PAGINATION)
    source = path.read_text()
    anchor = '    """Return one page of `items`; pages are numbered from 1."""\n'
    assert anchor in source
    path.write_text(source.replace(anchor, anchor + code))


def hidden(workspace: Path, task, tmp_path: Path):
    """run_hidden on the task's real hidden tests."""
    return run_hidden(workspace, task.hidden_dir, tmp_path / "j.xml", tmp_path / "home", BUILTIN.spec.runner)


def junit_cases(junit: Path) -> list[tuple[str, str, bool]]:
    """(classname, name, failed) of every testcase in a junit file."""
    return [
        (case.get("classname"), case.get("name"), any(c.tag in ("failure", "error") for c in case))
        for case in ET.parse(junit).getroot().iter("testcase")
    ]


def test_clean_solution_reports_only_the_hidden_tests(workspace, task, tmp_path):
    """The canary fails in every run, under a new name each time, and never shows in the outcome."""
    apply_patch(workspace, task.solution_patch)
    canaries = []
    for run in ("a", "b"):
        junit = tmp_path / f"{run}.xml"
        outcome = run_hidden(workspace, task.hidden_dir, junit, tmp_path / "home", BUILTIN.spec.runner)
        assert outcome.model_dump() == {
            "exit_code": 0,
            "ok": True,
            "collected": 4,
            "outside": 0,
            "failed": [],
            "skipped": [],
            "error": None,
        }
        extra = [case for case in junit_cases(junit) if case[0] != "test_pagination_hidden"]
        assert len(extra) == 3 and all(case[2] for case in extra), "three canaries, each failed"
        assert extra[0][0].startswith("test_00") and extra[-1][0].startswith("test_zz")
        canaries.append(extra)
    assert not {c[:2] for c in canaries[0]} & {c[:2] for c in canaries[1]}, "new names every run"


@pytest.mark.parametrize(
    "where, code",
    [
        ("init", SKIP_AT_IMPORT),
        ("init", IMPORTORSKIP_AT_IMPORT),
        ("paginate", '    import pytest\n\n    pytest.skip("x")\n'),
        ("paginate", '    import pytest\n\n    pytest.xfail("x")\n'),
    ],
    ids=["skip_module", "importorskip", "skip_in_function", "xfail_in_function"],
)
def test_skipped_or_xfailed_hidden_tests_fail(workspace, task, tmp_path, where, code):
    """Skipping the hidden tests from application code (pytest exits 0) is not a pass."""
    if where == "init":
        prepend(workspace / "taskapp" / "__init__.py", code)
    else:
        in_paginate(workspace, code)
    outcome = hidden(workspace, task, tmp_path)
    assert not outcome.ok
    assert outcome.failed == [] and outcome.skipped
    assert outcome.error.endswith("hidden tests were skipped or xfailed; a skip is a failure")


@pytest.mark.parametrize(
    "code",
    [FORCE_CALL_AND_REPORT, FORCE_LIVE_HOOK, REWRITE_JUNIT_AT_EXIT, FORCE_ALL_BUT_LAST],
    ids=["patched_runner", "hook_on_live_plugin_manager", "junit_rewritten_at_exit", "all_but_the_last"],
)
def test_forced_outcomes_trip_the_canary(workspace, task, tmp_path, code):
    """Each forcing hides the 4 real failures; only the canary, which passed too, gives it away."""
    prepend(workspace / "taskapp" / "__init__.py", code)
    outcome = hidden(workspace, task, tmp_path)
    assert not outcome.ok
    assert outcome.collected == 4 and outcome.failed == [CANARY_MARKER]
    assert re.match(CANARY_ERROR, outcome.error) and "passed instead of failing" in outcome.error


def test_a_run_cut_short_never_reaches_the_canary(workspace, task, tmp_path):
    """pytest.exit(returncode=1) where the bug would show: the canary runs last, so it is missing."""
    in_paginate(
        workspace,
        "    import sys\n\n"
        '    if "pytest" in sys.modules and page * page_size == len(items):\n'
        '        sys.modules["pytest"].exit("stop", returncode=1)\n',
    )
    outcome = hidden(workspace, task, tmp_path)
    assert not outcome.ok and outcome.failed[0] == CANARY_MARKER
    assert re.match(CANARY_ERROR, outcome.error) and "is missing from the junit report" in outcome.error


def test_exiting_the_test_process_at_import_fails(workspace, task, tmp_path):
    prepend(workspace / "taskapp" / "__init__.py", EXIT_AT_IMPORT)
    outcome = hidden(workspace, task, tmp_path)
    assert not outcome.ok and outcome.failed == ["<crash>"]
    assert outcome.error.startswith("pytest wrote no junit report (exit 0)")


def test_a_hidden_module_that_fails_to_import_is_a_plain_failure(taskapp, tmp_path):
    """A collection error fails the run without stopping the canary (no false alarm)."""
    src = tmp_path / "hidden"
    src.mkdir()
    (src / "test_broken.py").write_text("from taskapp.utils.pagination import no_such_name\n")
    (src / "test_fine.py").write_text("def test_fine():\n    assert True\n")
    outcome = run_hidden(taskapp, src, tmp_path / "j.xml", tmp_path / "home", BUILTIN.spec.runner)
    assert not outcome.ok and outcome.error is None
    assert outcome.collected == 2 and outcome.failed == ["test_broken"]


def test_hidden_tests_load_no_plugin_an_installed_package_registers(taskapp, tmp_path):
    """Only pytest's own plugins and taskapp_testing.plugin: none from an entry point."""
    src = tmp_path / "hidden"
    src.mkdir()
    (src / "test_plugins.py").write_text(
        "def test_no_entry_point_plugins(request):\n"
        "    assert request.config.pluginmanager.list_plugin_distinfo() == []\n"
        "    assert request.config.pluginmanager.has_plugin('taskapp_testing.plugin')\n"
    )
    outcome = run_hidden(taskapp, src, tmp_path / "j.xml", tmp_path / "home", BUILTIN.spec.runner)
    assert outcome.ok, outcome


# A pytest package planted at the workspace root, where `python -m pytest` would find it first.
# It knows the rig's canary convention and forges a report: canary failed, every other test passed.
FORGED_PYTEST_MAIN = """import re
import sys
from pathlib import Path

args = sys.argv[1:]
junit = next((a.split("=", 1)[1] for a in args if a.startswith("--junitxml=")), None)
if junit is None:
    sys.exit(0)
cases = []
for module in sorted(Path(args[-1]).glob("test_*.py")):
    text = module.read_text()
    canary = re.search(r'raise AssertionError\\("([0-9a-f]+)"\\)', text)
    for name in re.findall(r"^def (test_\\w+)", text, re.M):
        body = f'<failure message="AssertionError: {canary.group(1)}">x</failure>' if canary else ""
        cases.append(f'<testcase classname="{module.stem}" name="{name}">{body}</testcase>')
Path(junit).write_text("<testsuites><testsuite>" + "".join(cases) + "</testsuite></testsuites>")
sys.exit(1)
"""


def test_a_pytest_planted_in_the_workspace_is_not_the_one_that_runs(workspace, task, tmp_path):
    fake = workspace / "pytest"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(FORGED_PYTEST_MAIN)
    # The plant works: a plain interpreter in the workspace imports it as pytest.
    probe = subprocess.run(
        [sys.executable, "-c", "import pytest; print(pytest.__file__)"],
        cwd=workspace,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert probe.stdout.strip() == str(fake / "__init__.py"), probe.stderr
    outcome = hidden(workspace, task, tmp_path)
    assert not outcome.ok
    assert outcome.failed == task.spec.baseline.fails_hidden


FORCE_PASS_CONFTEST = """import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    report.outcome = "passed"
    return report
"""


def plant_fake_hidden_tests(folder: Path) -> None:
    """A force-pass conftest.py and a passing test of the hidden module's name."""
    folder.mkdir()
    (folder / "conftest.py").write_text(FORCE_PASS_CONFTEST)
    (folder / "test_pagination_hidden.py").write_text("def test_exact_multiple_last_page():\n    pass\n")


def test_a_preplaced_hidden_tests_folder_is_replaced(workspace, task, tmp_path):
    plant_fake_hidden_tests(workspace / HIDDEN_DEST)
    outcome = hidden(workspace, task, tmp_path)
    assert not outcome.ok and outcome.failed == task.spec.baseline.fails_hidden
    assert not (workspace / HIDDEN_DEST / "conftest.py").exists()


def test_a_preplaced_hidden_tests_symlink_is_replaced_and_its_target_untouched(workspace, task, tmp_path):
    outside = tmp_path / "outside"
    plant_fake_hidden_tests(outside)
    before = tree_digest(outside)
    (workspace / HIDDEN_DEST).symlink_to(outside, target_is_directory=True)
    outcome = hidden(workspace, task, tmp_path)
    assert not outcome.ok and outcome.failed == task.spec.baseline.fails_hidden
    dest = workspace / HIDDEN_DEST
    assert dest.is_dir() and not dest.is_symlink()
    assert tree_digest(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == ["conftest.py", "test_pagination_hidden.py"]


# --- red team: bytecode ---------------------------------------------------------------------


def forge_cached_bytecode(source: Path, forged_source: str, scratch: Path) -> Path:
    """Compile forged_source into the __pycache__ file Python would load for `source`.

    The header carries `source`'s own mtime and size, so a normal import trusts it.
    """
    scratch.mkdir(parents=True, exist_ok=True)
    forged = scratch / source.name
    forged.write_text(forged_source)
    target = source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc"
    py_compile.compile(str(forged), cfile=str(target), doraise=True)
    stat = source.stat()
    data = bytearray(target.read_bytes())
    data[8:16] = struct.pack("<II", int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF)
    target.write_bytes(bytes(data))
    return target


def test_planted_bytecode_is_not_run_by_verification(workspace, task, tmp_path):
    """A cached .pyc of the fixed module, under the buggy source, is never what verification runs."""
    source = workspace.joinpath(*PAGINATION)
    buggy = source.read_text()
    fixed = buggy.replace("has_next=end <= len(items)", "has_next=end < len(items)")
    assert fixed != buggy
    forge_cached_bytecode(source, fixed + "FORGED = True\n", tmp_path / "forge")
    # The plant works: a plain interpreter in the workspace runs the forged bytecode.
    probe = subprocess.run(
        [sys.executable, "-c", "import taskapp.utils.pagination as m; print(m.FORGED)"],
        cwd=workspace,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert probe.stdout.strip() == "True", probe.stderr

    outcome = hidden(workspace, task, tmp_path)
    assert not outcome.ok and outcome.failed == task.spec.baseline.fails_hidden
    check = run_check(workspace, tmp_path / "home", BUILTIN.spec.gate)
    assert not check.ok and "pytest" in check.failed


# scripts/json.py: check.py's `import json` would find it first (sys.path[0] is the script's
# directory) and it reports a pass before any stage runs.
FORGED_JSON = 'import os\n\nprint(\'{"ok": true, "failed": [], "results": {}}\', flush=True)\nos._exit(0)\n'


def test_a_module_shadowing_the_stdlib_next_to_check_py_is_not_imported(workspace, tmp_path):
    (workspace / "scripts" / "json.py").write_text(FORGED_JSON)
    assert run_check_json(workspace) == (0, {"ok": True, "failed": [], "results": {}})  # the plant works
    outcome = run_check(workspace, tmp_path / "home", BUILTIN.spec.gate)
    assert not outcome.ok and outcome.failed == ["pytest"]


# --- judged by test: a mined task's fail-to-pass and pass-to-pass tests decide it -------------

FMT_TESTS = """import sys

import pytest


def test_thousands():
    assert f"{1250:,}" == "1,250"


def test_small():
    assert f"{50}" == "50"


def test_with_babel():
    pytest.importorskip("babel_is_not_installed_here")


def test_on_an_old_interpreter():
    assert sys.version_info < (3, 0)
"""
FMT_JUDGED = frozenset({"test_fmt::test_thousands", "test_fmt::test_small"})


def own_paths_hidden(tmp_path: Path, conftest: str | None = None) -> HiddenOutcome:
    """The hidden file FMT_TESTS run at its own path in a tree whose tests/conftest.py is `conftest`."""
    work, hidden_src = tmp_path / "work", tmp_path / "hidden"
    (work / "tests").mkdir(parents=True)
    (hidden_src / "tests").mkdir(parents=True)
    (hidden_src / "tests" / "test_fmt.py").write_text(FMT_TESTS)
    if conftest is not None:
        (work / "tests" / "conftest.py").write_text(conftest)
    return run_hidden(
        work,
        hidden_src,
        tmp_path / "j.xml",
        tmp_path / "home",
        RunnerSpec(kind="pytest"),
        placement=Placement(at="own-paths", tests=("tests/test_fmt.py",)),
    )


def test_tests_outside_a_task_neither_count_nor_fail_it(tmp_path):
    """A skip and a failure whatever the code, outside the judged tests: the judged ones decide."""
    ran = own_paths_hidden(tmp_path)
    assert not ran.ok and ran.failed == ["test_fmt::test_on_an_old_interpreter"]
    assert ran.skipped == ["test_fmt::test_with_babel"]
    judged = judge_hidden(ran, FMT_JUDGED)
    assert judged.ok and judged.exit_code == 0 and judged.error is None
    assert (judged.collected, judged.outside, judged.failed, judged.skipped) == (2, 2, [], [])
    # Every test judges a task judged by file (hand-written, or mined before): unchanged.
    assert judge_hidden(ran, None) == ran
    # A skip of a judged test is a failure, as before.
    skipping = judge_hidden(ran, FMT_JUDGED | {"test_fmt::test_with_babel"})
    assert not skipping.ok and skipping.skipped == ["test_fmt::test_with_babel"]
    assert skipping.error == "1 of 3 judged hidden tests were skipped or xfailed; a skip is a failure"


def test_a_judged_test_a_planted_conftest_deselects_fails(tmp_path):
    """An agent's conftest.py beside the hidden file drops a judged test from the run: every other
    test passes and pytest exits as if all were well, but the judged test is missing, so it failed."""
    deselect = (
        "def pytest_collection_modifyitems(config, items):\n"
        "    items[:] = [i for i in items if i.name != 'test_thousands']\n"
    )
    ran = own_paths_hidden(tmp_path, deselect)
    assert "test_fmt::test_thousands" not in {*ran.passed, *ran.failed, *ran.skipped}
    judged = judge_hidden(ran, FMT_JUDGED)
    assert not judged.ok and judged.failed == ["test_fmt::test_thousands"]
    assert judged.error == "1 of 2 judged hidden tests did not run (test_fmt::test_thousands)"
    assert judged.problems["test_fmt::test_thousands"] == "did not run: not in the runner's report"

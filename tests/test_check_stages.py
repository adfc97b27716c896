"""Behaviour of the taskapp gate (fixtures/taskapp/scripts/check.py), one stage at a time.

Every test works on a fresh copy of the fixture, injects one violation with a plain text edit and
checks that exactly the stage meant to catch it fails, with a problem that points at the change.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_check_json

STAGES = ["ruff", "pytest", "generated", "raise_scan", "magic_numbers", "registry"]
USER_SERVICE = "taskapp/services/user_service.py"
USER_SERVICE_IMPORTS = "from taskapp.constants import ADMIN_ROLE\n"
ERRORS_IMPORT = "from taskapp.errors import NotFoundError, PermissionDeniedError\n"
PROJECT_ARCHIVED_FIELD = '      {"name": "archived", "type": "bool", "default": false}\n'
PROJECT_WITH_COLOR = (
    PROJECT_ARCHIVED_FIELD.replace("}\n", "},\n") + '      {"name": "color", "type": "str", "default": ""}\n'
)


def edit(path: Path, old: str, new: str) -> None:
    """Replace the single occurrence of `old` in `path` with `new`."""
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} must occur exactly once in {path}"
    path.write_text(text.replace(old, new))


def append(path: Path, addition: str) -> None:
    path.write_text(path.read_text() + addition)


def line_of(path: Path, needle: str) -> int:
    """The 1-based number of the only line of `path` containing `needle`."""
    hits = [n for n, line in enumerate(path.read_text().splitlines(), start=1) if needle in line]
    assert len(hits) == 1, f"{needle!r} must occur on exactly one line of {path}, found {hits}"
    return hits[0]


def assert_clean(code: int, report: dict) -> None:
    assert report == {"ok": True, "failed": [], "results": {stage: [] for stage in STAGES}}
    assert code == 0


def assert_only_failure(code: int, report: dict, stage: str) -> list[str]:
    """The report fails `stage` and nothing else; return that stage's problems."""
    assert list(report["results"]) == STAGES
    assert report["failed"] == [stage], report["results"]
    assert report["ok"] is False
    assert code == 1
    problems = report["results"][stage]
    assert problems and all(isinstance(p, str) for p in problems)
    return problems


def run_check_human(workdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/check.py"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_clean_fixture_passes_every_stage(taskapp):
    """The untouched fixture is green: exit 0 and an empty problem list for all six stages."""
    assert_clean(*run_check_json(taskapp))


def test_ruff_reports_unused_import(taskapp):
    """A lint error in a taskapp module fails ruff alone, naming file and line."""
    path = taskapp / "taskapp/utils/text.py"
    edit(path, "import re\n", "import os\nimport re\n")
    problems = assert_only_failure(*run_check_json(taskapp), "ruff")
    assert any(
        p.startswith(f"taskapp/utils/text.py:{line_of(path, 'import os')}:") and "F401" in p for p in problems
    ), problems


def test_pytest_runs_contract_suite_with_plugin(taskapp):
    """A failing contract test (using the plugin's app_client fixture) fails pytest alone."""
    append(
        taskapp / "tests/contract/test_health_api.py",
        "\n\ndef test_injected_contract_failure(app_client):\n"
        '    assert app_client.get("/health").status == 418\n',
    )
    problems = assert_only_failure(*run_check_json(taskapp), "pytest")
    assert len(problems) == 1, problems
    assert problems[0].startswith(
        "FAILED tests/contract/test_health_api.py::test_injected_contract_failure"
    ), problems


def test_pytest_runs_unit_suite(taskapp):
    """A failing unit test fails pytest alone and is reported by node id."""
    append(
        taskapp / "tests/unit/test_errors.py",
        '\n\ndef test_injected_unit_failure():\n    assert NotFoundError("x").status == 500\n',
    )
    problems = assert_only_failure(*run_check_json(taskapp), "pytest")
    assert len(problems) == 1, problems
    assert problems[0].startswith("FAILED tests/unit/test_errors.py::test_injected_unit_failure"), problems


def test_generated_rejects_hand_edited_models(taskapp):
    """Editing models_generated.py by hand fails generated, naming the models file."""
    edit(
        taskapp / "taskapp/models_generated.py",
        "    archived: bool = False\n",
        '    archived: bool = False\n    color: str = ""\n',
    )
    problems = assert_only_failure(*run_check_json(taskapp), "generated")
    assert len(problems) == 1, problems
    assert problems[0].startswith("taskapp/models_generated.py differs from the render of schema/models.json")


def test_generated_rejects_schema_edit_without_regeneration(taskapp):
    """Changing schema/models.json without regenerating flags both the models and the lock."""
    edit(
        taskapp / "schema/models.json",
        PROJECT_ARCHIVED_FIELD,
        PROJECT_WITH_COLOR,
    )
    problems = assert_only_failure(*run_check_json(taskapp), "generated")
    assert len(problems) == 2, problems
    assert problems[0].startswith("taskapp/models_generated.py differs from the render of schema/models.json")
    assert problems[1].startswith("schema/models.lock does not match schema/models.json")


def test_generated_accepts_schema_edit_after_regeneration(taskapp):
    """Editing the schema and running scripts/gen_models.py leaves the whole gate green."""
    edit(
        taskapp / "schema/models.json",
        PROJECT_ARCHIVED_FIELD,
        PROJECT_WITH_COLOR,
    )
    subprocess.run(
        [sys.executable, "scripts/gen_models.py"], cwd=taskapp, check=True, capture_output=True, timeout=60
    )
    assert '    color: str = ""\n' in (taskapp / "taskapp/models_generated.py").read_text()
    assert_clean(*run_check_json(taskapp))


RAISE_SPELLINGS = {
    "call": ("", "", 'raise ValueError("x")', "ValueError"),
    "bare_class": ("", "", "raise KeyError", "KeyError"),
    "builtins_module": ("import builtins\n\n", "", 'raise builtins.RuntimeError("x")', "RuntimeError"),
    "builtins_module_alias": ("import builtins as b\n\n", "", 'raise b.TypeError("x")', "TypeError"),
    "from_builtins_alias": (
        "from builtins import LookupError as Missing\n\n",
        "",
        'raise Missing("x")',
        "LookupError",
    ),
    "module_level_alias": ("", "Alias = ValueError\n", 'raise Alias("x")', "ValueError"),
    "annotated_module_level_alias": ("", "Alias: type = ValueError\n", 'raise Alias("x")', "ValueError"),
}


@pytest.mark.parametrize("spelling", list(RAISE_SPELLINGS))
def test_raise_scan_catches_builtin_exception_spellings(taskapp, spelling):
    """A built-in exception raised under any spelling or alias fails raise_scan with file and line."""
    imports, prelude, statement, builtin = RAISE_SPELLINGS[spelling]
    path = taskapp / USER_SERVICE
    edit(path, USER_SERVICE_IMPORTS, imports + USER_SERVICE_IMPORTS)
    if prelude:
        edit(path, "\n\ndef get_user(", f"\n{prelude}\n\ndef get_user(")
    append(path, f"\n\ndef _never_called() -> None:\n    {statement}\n")
    problems = assert_only_failure(*run_check_json(taskapp), "raise_scan")
    assert problems == [
        f"{USER_SERVICE}:{line_of(path, statement)}: raises built-in {builtin}; "
        "raise an AppError subclass from taskapp/errors.py with a code"
    ]


def test_raise_scan_shadowing_is_scoped_to_the_defining_function(taskapp):
    """A class named KeyError inside one function does not excuse a built-in KeyError raised elsewhere."""
    path = taskapp / USER_SERVICE
    edit(path, ERRORS_IMPORT, ERRORS_IMPORT.replace("import ", "import AppError, ", 1))
    append(
        path,
        "\n\ndef _local_error() -> type:\n"
        '    class KeyError(AppError):\n        default_code = "LOCAL"\n\n'
        "    return KeyError\n"
        '\n\ndef _never_called() -> None:\n    raise KeyError("x")\n',
    )
    problems = assert_only_failure(*run_check_json(taskapp), "raise_scan")
    assert problems == [
        f"{USER_SERVICE}:{line_of(path, 'raise KeyError')}: raises built-in KeyError; "
        "raise an AppError subclass from taskapp/errors.py with a code"
    ]


def test_raise_scan_allows_app_errors_and_local_shadowing_classes(taskapp):
    """Raising AppError subclasses, including a local class named like a built-in, passes."""
    path = taskapp / USER_SERVICE
    edit(path, ERRORS_IMPORT, ERRORS_IMPORT.replace("import ", "import AppError, ", 1))
    append(
        path,
        '\n\nclass TimeoutError(AppError):\n    default_code = "TIMEOUT"\n'
        "\n\ndef _never_called(flag: bool) -> None:\n"
        '    if flag:\n        raise NotFoundError("x", code="X")\n'
        '    raise TimeoutError("x", code="SLOW")\n',
    )
    assert_clean(*run_check_json(taskapp))


def test_raise_scan_allows_a_builtin_name_rebound_to_an_app_error(taskapp):
    """`ValueError = NotFoundError` at module level makes `raise ValueError(...)` an app error."""
    path = taskapp / USER_SERVICE
    edit(path, "\n\n\ndef get_user(", "\n\nValueError = NotFoundError\n\n\ndef get_user(")
    append(path, '\n\ndef _never_called() -> None:\n    raise ValueError("x", code="X")\n')
    assert_clean(*run_check_json(taskapp))


MAGIC_NUMBERS = {
    "service_int": (USER_SERVICE, "_RETRY_LIMIT = 42", "42"),
    "service_float": (USER_SERVICE, "_BACKOFF = 0.5", "0.5"),
    "route_int": ("taskapp/routes/users.py", "_PAGE = 42", "42"),
    "function_level": (USER_SERVICE, "def _never_called() -> int:\n    return 7", "7"),
    "float_one": (USER_SERVICE, "_RATIO = 1.0", "1.0"),
}


@pytest.mark.parametrize("case", list(MAGIC_NUMBERS))
def test_magic_numbers_flags_literals_in_routes_and_services(taskapp, case):
    """Numeric literals other than 0, 1 and -1 in routes/ or services/ fail magic_numbers."""
    rel, code, literal = MAGIC_NUMBERS[case]
    path = taskapp / rel
    append(path, f"\n\n{code}\n")
    problems = assert_only_failure(*run_check_json(taskapp), "magic_numbers")
    needle = code.splitlines()[-1]
    assert problems == [
        f"{rel}:{line_of(path, needle)}: numeric literal {literal}; name it in taskapp/constants.py"
    ]


def test_magic_numbers_allows_constants_utils_and_minus_one(taskapp):
    """Literals belong in constants.py, utils/ is out of scope, and -1, 0, 1 and booleans are fine."""
    append(taskapp / "taskapp/constants.py", "\nANSWER = 42\n")
    append(taskapp / "taskapp/utils/text.py", "\n\n_WIDTH = 42\n")
    append(taskapp / USER_SERVICE, "\n\n_LAST = -1\n_FIRST = 0\n_NEXT = 1\n_ENABLED = True\n")
    assert_clean(*run_check_json(taskapp))


HANDLE_PING = '\n\ndef handle_ping(request) -> tuple[int, dict]:\n    return HTTP_OK, {"status": "ok"}\n'
HEALTH_ROUTE = '    Route("GET", "/health", health.handle_health, "HealthSchema"),\n'


def test_registry_flags_unregistered_handler(taskapp):
    """A handle_* function without a Route fails registry, naming the module and function."""
    append(taskapp / "taskapp/routes/health.py", HANDLE_PING)
    problems = assert_only_failure(*run_check_json(taskapp), "registry")
    assert problems == [
        "taskapp/routes/health.py: handle_ping has no Route in taskapp/registry.py ROUTE_REGISTRY"
    ]


def test_registry_flags_unexported_response_schema(taskapp):
    """A route naming a schema missing from schemas.__all__ fails registry, even if the name exists."""
    append(taskapp / "taskapp/routes/health.py", HANDLE_PING)
    edit(
        taskapp / "taskapp/registry.py",
        HEALTH_ROUTE,
        HEALTH_ROUTE + '    Route("GET", "/ping", health.handle_ping, "Schema"),\n',
    )
    problems = assert_only_failure(*run_check_json(taskapp), "registry")
    assert problems == [
        "GET /ping: response schema Schema is not exported in taskapp/schemas/__init__.py __all__"
    ]


def test_registry_flags_duplicate_route(taskapp):
    """Registering the same method and path twice fails registry."""
    edit(taskapp / "taskapp/registry.py", HEALTH_ROUTE, HEALTH_ROUTE * 2)
    problems = assert_only_failure(*run_check_json(taskapp), "registry")
    assert problems == ["GET /health: registered twice"]


def test_crashing_stage_fails_without_stopping_the_gate(taskapp):
    """An exception inside a stage fails that stage as 'stage crashed' while the others still run."""
    (taskapp / "schema/models.json").write_text("{ not json\n")
    problems = assert_only_failure(*run_check_json(taskapp), "generated")
    assert len(problems) == 1, problems
    assert problems[0].startswith("stage crashed: JSONDecodeError:"), problems


def test_every_stage_reports_in_one_run(taskapp):
    """Violations of several stages are all reported together, in stage order."""
    append(
        taskapp / USER_SERVICE,
        '\n\n_LIMIT = 42\n\n\ndef _never_called() -> None:\n    raise ValueError("x")\n',
    )
    edit(taskapp / "taskapp/registry.py", HEALTH_ROUTE, HEALTH_ROUTE * 2)
    code, report = run_check_json(taskapp)
    assert code == 1
    assert report["ok"] is False
    assert report["failed"] == ["raise_scan", "magic_numbers", "registry"]
    assert [stage for stage in STAGES if report["results"][stage]] == report["failed"]


def test_human_output_passes_on_clean_fixture(taskapp):
    """Without --json the gate lists every stage, ends with 'check passed' and exits 0."""
    proc = run_check_human(taskapp)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert lines[-1] == "check passed"
    assert lines[:-1] == [f"[ ok ] {stage}" for stage in STAGES]


def test_human_output_names_failed_stages(taskapp):
    """Without --json a failing gate exits 1 and its last line names the failed stages."""
    edit(taskapp / "taskapp/registry.py", HEALTH_ROUTE, HEALTH_ROUTE * 2)
    append(taskapp / USER_SERVICE, "\n\n_LIMIT = 42\n")
    proc = run_check_human(taskapp)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert lines[-1] == "check FAILED: magic_numbers, registry"
    assert "[FAIL] registry" in lines
    assert "       GET /health: registered twice" in lines

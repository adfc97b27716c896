"""Small real git repositories with a history of fixes, clean and messy, for `rig task mine`.

Each builder commits, in order, the steps it lists and returns the repository and, per commit
subject, the verdict `rig task mine` must give it.
"""

import subprocess
from collections.abc import Callable
from pathlib import Path

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "dev",
    "GIT_AUTHOR_EMAIL": "dev@example.invalid",
    "GIT_COMMITTER_NAME": "dev",
    "GIT_COMMITTER_EMAIL": "dev@example.invalid",
    "PATH": "/usr/bin:/bin",
}


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` with a fixed identity; its stdout."""
    env = {**GIT_ENV, "HOME": str(repo)}
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout


def commit(repo: Path, message: str, files: dict[str, str | None]) -> str:
    """Write (or, for None, delete) `files` and commit them; the commit's sha."""
    for rel, text in files.items():
        path = repo / rel
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def history(repo: Path) -> tuple[Path, dict[str, str], Callable[[str, str, dict[str, str | None]], None]]:
    """A new repository, the verdict expected per commit subject, and `step(message, verdict,
    files)`, which commits `files` and expects `verdict` for that commit."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    expected: dict[str, str] = {}

    def step(message: str, verdict: str, files: dict[str, str | None]) -> None:
        commit(repo, message, files)
        expected[message] = verdict

    return repo, expected, step


OPS_V1 = '''"""Arithmetic helpers."""


def add(a, b):
    return a + b


def subtract(a, b):
    return b - a


def clamp(value, low, high):
    return max(low, min(value, low))


def mean(values):
    return sum(values) / len(values)

'''
PARSE_V1 = '''"""Parsing user input."""


def parse_int(text):
    return int(text)


def parse_flag(text):
    """Yes or no, as people write it."""
    text = text.strip().lower()
    if text in ("y", "yes", "true", "1"):
        return True
    if text in ("n", "no", "false", "0"):
        return False
    raise ValueError(text)


def parse_pair(text):
    left, right = text.split(",")
    return parse_int(left), parse_int(right)
'''
FMT_V1 = '''"""Formatting numbers for people."""


def percent(value):
    return f"{value * 100:.0f}%"
'''
TESTS_V1 = """from calc.ops import add


def test_add():
    assert add(2, 3) == 5
"""
PYPROJECT = """[project]
name = "calc"
version = "0.1.0"

[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = "-m 'not slow'"
"""


# A fix whose test passes before it as well: it does not test the change.
PERCENT_FIX = (
    "Fix percent rounding for tiny values",
    "no-fail-to-pass",
    {
        "calc/fmt.py": FMT_V1.replace(":.0f}", ":.1f}"),
        "tests/test_percent.py": "from calc.fmt import percent\n\n\ndef test_percent_is_text():\n"
        "    assert percent(0.5).endswith('%')\n",
    },
)


def python_repo(root: Path) -> tuple[Path, dict[str, str]]:
    """A Python project (pytest) whose history holds ten candidate commits and one merge."""
    repo, expected, step = history(root / "calc")

    step(
        "Start the calculator",
        "root",
        {
            "pyproject.toml": PYPROJECT,
            "README.md": "# calc\n\nRun the tests with `python -m pytest`.\n",
            "calc/__init__.py": "",
            "calc/ops.py": OPS_V1,
            "calc/parse.py": PARSE_V1,
            "calc/fmt.py": FMT_V1,
            "tests/test_ops.py": TESTS_V1,
        },
    )
    ops = OPS_V1.replace("return b - a", "return a - b")
    step(
        "Fix subtract() returning the difference with the wrong sign",
        "mined",
        {
            "calc/ops.py": ops,
            "tests/test_ops.py": TESTS_V1.replace("import add", "import add, subtract")
            + "\n\ndef test_subtract():\n    assert subtract(5, 3) == 2\n",
        },
    )
    step(
        "Say how to install", "no-tests", {"README.md": "# calc\n\npip install -e . then python -m pytest\n"}
    )
    step(
        "Fix clamp ignoring the upper bound",
        "mined",
        {
            "calc/ops.py": (ops := ops.replace("min(value, low)", "min(value, high)")),
            "tests/test_clamp.py": "from calc.ops import clamp\n\n\ndef test_clamp_high():\n"
            "    assert clamp(10, 0, 5) == 5\n",
        },
    )
    # Rewrites the very line the clamp fix changed: that fix's reverse no longer applies to the
    # snapshot, so its task starts at its own parent.
    step(
        "Write clamp as a conditional",
        "no-tests",
        {
            "calc/ops.py": (
                ops := ops.replace(
                    "return max(low, min(value, high))",
                    "return low if value < low else high if value > high else value",
                )
            )
        },
    )
    step(
        "Fix mean of an empty list raising ZeroDivisionError",
        "flaky",
        {
            "calc/ops.py": (
                ops := ops.replace(
                    "return sum(values) / len(values)", "return sum(values) / len(values) if values else 0.0"
                )
            ),
            # Order-dependent state, as flaky tests have: every other run with one home fails (the
            # home, not the tree: an agent's own test run must not fail the rig's gate later).
            "tests/test_mean.py": "import os\nfrom pathlib import Path\n\nfrom calc.ops import mean\n\n\n"
            "def test_mean_empty():\n    assert mean([]) == 0.0\n\n\n"
            "def test_mean_counts_runs():\n    marker = Path(os.environ['HOME'], '.mean-runs')\n"
            "    runs = int(marker.read_text()) if marker.exists() else 0\n"
            "    marker.write_text(str(runs + 1))\n    assert runs % 2 == 0\n",
        },
    )
    step(*PERCENT_FIX)
    # Its conftest.py is protected: the task keeps the snapshot's, whose fixture its test needs.
    step(
        "Fix divide by zero message in the tests' fixtures",
        "mined",
        {
            "calc/ops.py": (ops := ops + "\n\ndef divide(a, b):\n    return a / b\n"),
            "tests/conftest.py": "import pytest\n\n\n@pytest.fixture\ndef zero():\n    return 0\n",
            "tests/test_divide.py": "import pytest\n\nfrom calc.ops import divide\n\n\n"
            "def test_divide_by_zero(zero):\n    with pytest.raises(ZeroDivisionError):\n"
            "        divide(1, zero)\n",
        },
    )
    step(
        "Add tests for parse_pair",
        "no-source",
        {
            "tests/test_parse.py": "from calc.parse import parse_pair\n\n\ndef test_pair():\n"
            "    assert parse_pair('1,2') == (1, 2)\n",
        },
    )
    step(
        "Add a float comparison helper for the tests",
        "protected",
        {"tests/helpers.py": "def close(a, b):\n    return abs(a - b) < 1e-9\n"},
    )
    # Its test imports that helper, which is no test file: run at its own path, beside the helper,
    # as pytest runs the project's tests, it imports it.
    step(
        "Fix median of an even number of values",
        "mined",
        {
            "calc/stats.py": "def median(values):\n    s = sorted(values)\n    n = len(s)\n"
            "    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n",
            "tests/test_stats.py": "from helpers import close\n\nfrom calc.stats import median\n\n\n"
            "def test_even():\n    assert close(median([1, 2, 3, 4]), 2.5)\n",
        },
    )
    # Its test file holds, beside the test of the fix and one that passes before it, one that skips
    # where an optional dependency is missing and one that fails whatever the code (marked slow, so
    # that the gate, which deselects slow tests, passes): both are outside the task, which they
    # cost before rig judged by test ("a skip is a failure" made it solution-fails).
    step(
        "Show a thousands separator in big numbers",
        "mined",
        {
            "calc/big.py": "def thousands(value):\n    return f'{value:,}'\n",
            "tests/test_fmt.py": "import sys\n\nimport pytest\n\nfrom calc.fmt import percent\n\n\n"
            "def test_thousands():\n    from calc.big import thousands\n\n"
            "    assert thousands(1250) == '1,250'\n\n\n"
            "def test_small():\n    assert percent(0.5).endswith('%')\n\n\n"
            "def test_with_babel():\n    babel = pytest.importorskip('babel_is_not_installed_here')\n"
            "    assert babel.numbers.format_decimal(1250) == '1,250'\n\n\n"
            "@pytest.mark.slow\ndef test_on_an_old_interpreter():\n    assert sys.version_info < (3, 0)\n",
        },
    )
    # Its test asserts what the fix does not do, so it fails after the fix too; it is marked slow,
    # which the project's own run (the gate: addopts -m 'not slow') deselects, where the hidden
    # tests run every test they are given.
    step(
        "Round the mean of values to two places",
        "solution-fails",
        {
            "calc/mean.py": "def mean2(values):\n    return round(sum(values) / len(values), 2)\n",
            "tests/test_mean2.py": "import pytest\n\nfrom calc.mean import mean2\n\n\n"
            "@pytest.mark.slow\ndef test_thirds():\n    assert mean2([1, 1, 2]) == 1.34\n",
        },
    )
    step(
        "fix: calc/units.py",
        "no-message",
        {
            "calc/units.py": "def km(m):\n    return m / 1000\n",
            "tests/test_units.py": "from calc.units import km\n\n\n"
            "def test_km():\n    assert km(1500) == 1.5\n",
        },
    )
    step(
        "Bump the generated version file",
        "generated",
        {
            "calc/_version.py": "# generated by the release script: do not edit\nVERSION = '0.1.1'\n",
            "tests/test_version.py": "from calc._version import VERSION\n\n\ndef test_version():\n"
            "    assert VERSION\n",
        },
    )
    parse = PARSE_V1.replace("return int(text)", "return int(text, 0)").replace(
        'left, right = text.split(",")', 'left, right = text.replace(";", ",").split(",")'
    )
    step(
        "Fix parsing of hex numbers and of pairs split by semicolons in calc/parse.py",
        "mined",
        {
            "calc/parse.py": parse,
            "calc/ops.py": (
                ops := ops.replace(
                    "def add(a, b):\n    return a + b", "def add(a, b):\n    return int(a) + int(b)"
                )
            ),
            "tests/test_parse.py": "from calc.ops import add\n"
            "from calc.parse import parse_int, parse_pair\n\n\n"
            "def test_pair():\n    assert parse_pair('1,2') == (1, 2)\n\n\n"
            "def test_hex():\n    assert parse_int('0x1f') == 31\n\n\n"
            "def test_pair_with_semicolon():\n    assert parse_pair('1;2') == (1, 2)\n\n\n"
            "def test_add_text():\n    assert add('2', 3) == 5\n",
        },
    )
    git(repo, "checkout", "-q", "-b", "side", "HEAD~1")
    commit(repo, "Note the license", {"LICENSE": "MIT\n"})
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge the license note", "side")
    expected["Merge the license note"] = "merge"
    expected["Note the license"] = "no-tests"
    return repo, expected


SLUG_V1 = """export function slugify(title) {
  return title.toLowerCase().replace(" ", "-");
}

export function truncate(text, limit) {
  return text.length > limit ? text.slice(0, limit) : text;
}
"""
SLUG_TEST_V1 = """import assert from "node:assert/strict";
import { test } from "node:test";
import { slugify } from "../src/slug.mjs";

test("one word", () => {
  assert.equal(slugify("Hello"), "hello");
});
"""


def javascript_repo(root: Path) -> tuple[Path, dict[str, str]]:
    """A JavaScript project (node --test): one fix with tests, one without, one touching package.json."""
    repo, expected, step = history(root / "slugs")

    package = '{\n  "name": "slugs",\n  "type": "module",\n  "scripts": {"test": "node --test"}\n}\n'
    step(
        "Start the slug helpers",
        "root",
        {"package.json": package, "src/slug.mjs": SLUG_V1, "test/slug.test.mjs": SLUG_TEST_V1},
    )
    slug = SLUG_V1.replace('.replace(" ", "-")', '.trim().split(/\\s+/).join("-")')
    step(
        "Fix slugify keeping every space after the first",
        "mined",
        {
            "src/slug.mjs": slug,
            "test/slug.test.mjs": SLUG_TEST_V1
            + '\ntest("many words", () => {\n'
            + '  assert.equal(slugify(" A  long title "), "a-long-title");\n});\n',
        },
    )
    step(
        "Fix truncate cutting words in half",
        "no-tests",
        {
            "src/slug.mjs": slug.replace(
                "text.slice(0, limit)", 'text.slice(0, limit).replace(/\\s+\\S*$/, "")'
            )
        },
    )
    # Its package.json is protected: the task keeps the snapshot's; the fix and its test still judge.
    step(
        "Fix the test script to run every file",
        "mined",
        {
            "package.json": package.replace('"node --test"', '"node --test test/"'),
            "src/slug.mjs": slug + "\nexport const VERSION = 2;\n",
            "test/version.test.mjs": 'import assert from "node:assert/strict";\n'
            'import { test } from "node:test";\nimport { VERSION } from "../src/slug.mjs";\n\n'
            'test("version", () => assert.equal(VERSION, 2));\n',
        },
    )
    return repo, expected


CLAMP_V1 = """// A number held within [low, high].
function clamp(value, low, high) {
  return Math.max(value, low);
}

module.exports = { clamp };
"""
CLAMP_TEST_V1 = """const assert = require("node:assert/strict");
const { clamp } = require("../src/clamp");

describe("clamp", () => {
  it("keeps a value inside", () => {
    assert.equal(clamp(5, 0, 10), 5);
  });
});
"""


def mocha_repo(root: Path, lock_from: Path) -> tuple[Path, dict[str, str]]:
    """A JavaScript project tested by mocha with no spec of its own: its default ./test, whose
    file names (test/clamp.js) are no test file names of the kind. `lock_from` holds the
    package.json and package-lock.json of a project whose environment installs offline."""
    repo, expected, step = history(root / "clamp")
    step(
        "Start the clamp helper",
        "root",
        {
            "package.json": (lock_from / "package.json").read_text(),
            "package-lock.json": (lock_from / "package-lock.json").read_text(),
            "src/clamp.js": CLAMP_V1,
            "test/clamp.js": CLAMP_TEST_V1,
        },
    )
    step(
        "Fix clamp ignoring the upper bound",
        "mined",
        {
            "src/clamp.js": CLAMP_V1.replace("Math.max(value, low)", "Math.min(Math.max(value, low), high)"),
            "test/clamp.js": CLAMP_TEST_V1.replace(
                "\n});\n",
                '\n\n  it("holds a value above at high", () => {\n'
                "    assert.equal(clamp(15, 0, 10), 10);\n  });\n});\n",
            ),
        },
    )
    return repo, expected


WORDS_V1 = """export function first(text) {
  return text.split(" ")[1];
}

export function last(text) {
  const words = text.split(" ");
  return words[words.length];
}
"""
WORDS_TEST_V1 = """import assert from "node:assert/strict";
import { test } from "node:test";
import { first, last } from "../src/words.mjs";

test("exports", () => {
  assert.equal(typeof first, "function");
  assert.equal(typeof last, "function");
});
"""


def shared_tests_repo(root: Path) -> tuple[Path, dict[str, str]]:
    """Two clean fixes whose tests go into one shared file, the second's lines right after the
    first's: the older fix's reverse does not apply to the snapshot, so it is mined at its parent."""
    repo, expected, step = history(root / "words")
    package = '{\n  "name": "words",\n  "type": "module",\n  "scripts": {"test": "node --test"}\n}\n'
    step(
        "Start the word helpers",
        "root",
        {"package.json": package, "src/words.mjs": WORDS_V1, "test/words.test.mjs": WORDS_TEST_V1},
    )
    fixed_first = WORDS_V1.replace('split(" ")[1]', 'split(" ")[0]')
    first_test = WORDS_TEST_V1 + '\ntest("first word", () => {\n  assert.equal(first("a b c"), "a");\n});\n'
    step(
        "Fix first() returning the second word",
        "mined",
        {"src/words.mjs": fixed_first, "test/words.test.mjs": first_test},
    )
    step(
        "Fix last() returning undefined",
        "mined",
        {
            "src/words.mjs": fixed_first.replace("words[words.length]", "words[words.length - 1]"),
            "test/words.test.mjs": first_test
            + '\ntest("last word", () => {\n  assert.equal(last("a b c"), "c");\n});\n',
        },
    )
    return repo, expected


TITLE_V1 = """export function title(text) {
  return text.toUpperCase();
}
"""
TITLE_TEST_V1 = """import assert from "node:assert/strict";
import { test } from "node:test";
import { title } from "../src/title.mjs";

test("title case", () => {
  assert.equal(title("hello world"), "HELLO WORLD");
});
"""


def changed_assertion_repo(root: Path) -> tuple[Path, dict[str, str]]:
    """A fix that changes what an existing test asserts (its old version fails on the fixed code),
    as most behaviour fixes of a real history do: judged by the test's new version, it is a task."""
    repo, expected, step = history(root / "titles")
    package = '{\n  "name": "titles",\n  "type": "module",\n  "scripts": {"test": "node --test"}\n}\n'
    step(
        "Start the title helper",
        "root",
        {"package.json": package, "src/title.mjs": TITLE_V1, "test/title.test.mjs": TITLE_TEST_V1},
    )
    step(
        "Fix title() shouting instead of capitalising each word",
        "mined",
        {
            "src/title.mjs": TITLE_V1.replace(
                "text.toUpperCase()", "text.replace(/\\b\\w/g, (c) => c.toUpperCase())"
            ),
            "test/title.test.mjs": TITLE_TEST_V1.replace('"HELLO WORLD"', '"Hello World"'),
        },
    )
    return repo, expected


DAYS_PYPROJECT = """[project]
name = "days"
version = "0.1.0"
dependencies = []

[tool.pytest.ini_options]
testpaths = ["tests"]
"""


def start_days(
    step: Callable[[str, str, dict[str, str | None]], None], pyproject: str, imports: str
) -> tuple[str, str]:
    """Commit the day helpers' first version (weekend() knows Saturday only, weekday() Monday
    only) with `pyproject` and a test importing `imports`; the module's and the test's text."""
    week = (
        "def weekend(day):\n    return day in ('sat',)\n\n\ndef weekday(day):\n    return day in ('mon',)\n"
    )
    test = f"from days.week import {imports}\n\n\ndef test_saturday():\n    assert weekend('sat')\n"
    files = {
        "pyproject.toml": pyproject,
        "days/__init__.py": "",
        "days/week.py": week,
        "tests/test_week.py": test,
    }
    step("Start the day helpers", "root", files)
    return week, test


def dependency_repo(root: Path) -> tuple[Path, dict[str, str]]:
    """A Python project whose dependencies change around two fixes: the first fix's parent names a
    package no index has (its task is measured in the fixture's environment); the second's names
    none, where the snapshot names python-dateutil. The repository and, per fix's sha, the verdict
    `rig task mine --base parent` must give it."""
    repo, _expected, step = history(root / "days")
    pyproject = DAYS_PYPROJECT.replace("dependencies = []", 'dependencies = ["rig-no-such-package"]')
    week, test = start_days(step, pyproject, "weekend")
    week = week.replace("('sat',)", "('sat', 'sun')")
    test += "\n\ndef test_sunday():\n    assert weekend('sun')\n"
    step("Fix weekend() forgetting Sunday", "mined", {"days/week.py": week, "tests/test_week.py": test})
    first = git(repo, "rev-parse", "HEAD").strip()
    step("Drop a dependency nothing uses", "protected", {"pyproject.toml": DAYS_PYPROJECT})
    week = week.replace("('mon',)", "('mon', 'tue', 'wed', 'thu', 'fri')")
    test = test.replace("import weekend", "import weekday, weekend")
    test += "\n\ndef test_friday():\n    assert weekday('fri')\n"
    step("Fix weekday() knowing only Monday", "mined", {"days/week.py": week, "tests/test_week.py": test})
    second = git(repo, "rev-parse", "HEAD").strip()
    step(
        "Parse dates with python-dateutil",
        "protected",
        {
            "pyproject.toml": DAYS_PYPROJECT.replace(
                "dependencies = []", 'dependencies = ["python-dateutil"]'
            ),
            "days/parse.py": "from dateutil import parser\n\n\ndef day(text):\n"
            "    return parser.parse(text).strftime('%a').lower()\n",
        },
    )
    return repo, {first: "mined", second: "mined"}


def sealed_python_repo(root: Path) -> tuple[Path, str, str]:
    """A Python project (an [environment] from its pyproject.toml) with two fixes in one module: the
    repository, the first fix's sha (a task at its parent) and the second's (reversed on the
    snapshot). The snapshot holds both fixes: the tree an environment would copy."""
    repo, _expected, step = history(root / "days")
    week, test = start_days(step, DAYS_PYPROJECT, "weekday, weekend")
    week = week.replace("('sat',)", "('sat', 'sun')")
    test += "\n\ndef test_sunday_is_part_of_the_weekend():\n    assert weekend('sun')\n"
    step("Fix weekend() forgetting Sunday", "mined", {"days/week.py": week, "tests/test_week.py": test})
    first = git(repo, "rev-parse", "HEAD").strip()
    week = week.replace("('mon',)", "('mon', 'tue', 'wed', 'thu', 'fri')")
    test += "\n\ndef test_friday_is_a_working_day():\n    assert weekday('fri')\n"
    step("Fix weekday() knowing only Monday", "mined", {"days/week.py": week, "tests/test_week.py": test})
    return repo, first, git(repo, "rev-parse", "HEAD").strip()


def sealed_node_repo(root: Path, project: Path) -> tuple[Path, str, str]:
    """A node project (package.json and lockfiles of `project`, a fixture of tests/data, whose
    dependency semver installs offline) with two fixes, as sealed_python_repo: the repository, the
    first fix's sha (a task at its parent) and the second's (reversed on the snapshot)."""
    repo, _expected, step = history(root / "bump")
    files = {
        name: (project / name).read_text() for name in ("package.json", "package-lock.json", "pnpm-lock.yaml")
    }

    def bump(minor: str, major: str) -> str:
        return (
            'import semver from "semver";\n\nexport function nextMinor(version) {\n'
            f'  return semver.inc(version, "{minor}");\n}}\n\nexport function nextMajor(version) {{\n'
            f'  return semver.inc(version, "{major}");\n}}\n'
        )

    test = (
        'import assert from "node:assert/strict";\nimport { test } from "node:test";\n'
        'import { nextMajor, nextMinor } from "../src/bump.js";\n\n'
        'test("a minor of 0.1.0", () => {\n  assert.ok(nextMinor("0.1.0"));\n});\n'
    )
    step(
        "Start the version helpers",
        "root",
        {**files, "src/bump.js": bump("patch", "minor"), "test/bump.test.mjs": test},
    )
    test += '\ntest("the next minor of 1.2.3", () => {\n  assert.equal(nextMinor("1.2.3"), "1.3.0");\n});\n'
    step(
        "Fix nextMinor() bumping the patch",
        "mined",
        {"src/bump.js": bump("minor", "minor"), "test/bump.test.mjs": test},
    )
    first = git(repo, "rev-parse", "HEAD").strip()
    test += '\ntest("the next major of 1.2.3", () => {\n  assert.equal(nextMajor("1.2.3"), "2.0.0");\n});\n'
    step(
        "Fix nextMajor() bumping the minor",
        "mined",
        {"src/bump.js": bump("minor", "major"), "test/bump.test.mjs": test},
    )
    return repo, first, git(repo, "rev-parse", "HEAD").strip()


def stop_and_go_repo(root: Path, marker: str) -> tuple[Path, dict[str, str]]:
    """A short Python history, newest first: a fix (mined), a fix whose tests pass before it
    (no-fail-to-pass), and a fix whose test, before the fix, hangs in a process whose command line
    holds `marker`: where a stop signal finds the mining."""
    repo, expected, step = history(root / "stopgo")
    step(
        "Start the calculator",
        "root",
        {
            "pyproject.toml": PYPROJECT,
            "calc/__init__.py": "",
            "calc/ops.py": OPS_V1,
            "calc/fmt.py": FMT_V1,
            "tests/test_ops.py": TESTS_V1,
        },
    )
    step(
        "Fix clamp waiting for the clock",
        "interrupted",
        {
            "calc/ops.py": (ops := OPS_V1.replace("min(value, low)", "min(value, high)")),
            # It hangs only before the fix: the snapshot's gate and the fixed code pass it at once.
            "tests/test_clamp.py": "import subprocess\n\nfrom calc.ops import clamp\n\n\n"
            "def test_clamp_high():\n    if clamp(10, 0, 5) != 5:\n"
            f"        subprocess.run(['sh', '-c', 'sleep 300 # {marker}'])\n"
            "    assert clamp(10, 0, 5) == 5\n",
        },
    )
    step(*PERCENT_FIX)
    step(
        "Fix subtract() returning the difference with the wrong sign",
        "mined",
        {
            "calc/ops.py": ops.replace("return b - a", "return a - b"),
            "tests/test_ops.py": TESTS_V1.replace("import add", "import add, subtract")
            + "\n\ndef test_subtract():\n    assert subtract(5, 3) == 2\n",
        },
    )
    return repo, expected

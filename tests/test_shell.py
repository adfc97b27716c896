"""Shell-command analysis: what counts as searching, running the gate, running pytest, reading."""

import pytest

from harnesses.shell import is_doc, is_search, is_skill, read_paths, runs_check_script, runs_pytest, segments


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls", [["ls"]]),
        (
            "cd x && python3 -u scripts/check.py --json",
            [["cd", "x"], ["python3", "-u", "scripts/check.py", "--json"]],
        ),
        ("a | b || c; d & e", [["a"], ["b"], ["c"], ["d"], ["e"]]),
        ("FOO=1 BAR='a b' pytest -q", [["pytest", "-q"]]),
        ('bash -c "python scripts/check.py && ls"', [["python", "scripts/check.py"], ["ls"]]),
        ("sh -lc 'cat README.md'", [["cat", "README.md"]]),
        # One level of nesting is analysed; the inner shell is kept as a plain command.
        ("bash -c \"sh -c 'ls'\"", [["sh", "-c", "ls"]]),
        ("cat f 2>/dev/null >out.txt", [["cat", "f"]]),
        ("make 2>&1 | tee log", [["make"], ["tee", "log"]]),
        ("ls # list\npwd", [["ls"], ["pwd"]]),
        ("(cd src; ls)", [["cd", "src"], ["ls"]]),
        ("python x.py \\\n  --flag", [["python", "x.py", "--flag"]]),
        ("cat > conftest.py <<'EOF'\nimport os\nos.exit(0)\nEOF\nls", [["cat"], ["ls"]]),
        ('echo "a && b"', [["echo", "a && b"]]),
        ("", []),
        # Unparsable input falls back to a whitespace split instead of raising.
        ('echo "unterminated && ls', [["echo", '"unterminated'], ["ls"]]),
        ("echo 'x", [["echo", "'x"]]),
    ],
)
def test_segments(command, expected):
    assert segments(command) == expected


@pytest.mark.parametrize(
    "command",
    [
        "grep -rn paginate taskapp",
        "egrep x y",
        "rg has_next",
        "ag foo",
        "ack foo",
        "find . -name '*.py'",
        "fd pagination",
        "fdfind pagination",
        "ls -la docs",
        "tree -L 2",
        "git grep has_next",
        "git --no-pager grep -n x",
        "git -C sub ls-files",
        "cd taskapp && grep -r x .",
        "cat x | grep y",
        "/usr/bin/grep x y",
        "timeout 5 rg x",
        "bash -c 'find . -type f'",
    ],
)
def test_is_search_positive(command):
    assert is_search(command)


@pytest.mark.parametrize(
    "command",
    [
        "cat README.md",
        "git status",
        "git log --grep x",
        "echo grep",
        "python scripts/check.py",
        "sed -n 1,5p ls",
        "",
    ],
)
def test_is_search_negative(command):
    assert not is_search(command)


@pytest.mark.parametrize(
    "command",
    [
        "python scripts/check.py",
        "python3 scripts/check.py --json",
        "python3.11 ./scripts/check.py",
        ".venv/bin/python scripts/check.py",
        "/usr/bin/python3 scripts/check.py",
        "cd x && python3 -u scripts/check.py --json",
        'bash -c "python scripts/check.py"',
        "sh -lc 'cd . && python scripts/check.py'",
        "python -X dev scripts/check.py",
        "python -u -B scripts/check.py",
        "python -Xdev scripts/check.py",
        "./scripts/check.py",
        "scripts/check.py --json",
        "CI=1 python scripts/check.py",
        "env FOO=1 python scripts/check.py",
        "time python scripts/check.py",
        "timeout 600 python scripts/check.py",
        "python scripts/check.py 2>&1 | tail -20",
        "ruff check . ; python scripts/check.py",
        "python /tmp/ws/scripts/check.py",
    ],
)
def test_runs_check_script_positive(command):
    assert runs_check_script(command)


@pytest.mark.parametrize(
    "command",
    [
        "cat scripts/check.py",
        "grep x scripts/check.py",
        'echo "python scripts/check.py"',
        "echo python scripts/check.py > notes.txt",
        "python -m pytest scripts/check.py",
        "python -c 'import scripts.check'",
        "python scripts/gen_models.py scripts/check.py",
        "sed -n 1,20p scripts/check.py",
        "ruff check scripts/check.py",
        "python other/scripts/check.py.bak",
        "vim scripts/check.py",
        "",
    ],
)
def test_runs_check_script_negative(command):
    assert not runs_check_script(command)


@pytest.mark.parametrize(
    "command",
    [
        "pytest",
        "pytest -q tests/unit",
        "py.test",
        ".venv/bin/pytest -x",
        "python -m pytest",
        "python3 -m pytest -p taskapp_testing.plugin tests/unit tests/contract",
        "python -mpytest -q",
        "python -X dev -m pytest",
        "cd x && PYTHONPATH=. pytest",
        "bash -c 'pytest -q'",
        "timeout 60 pytest",
    ],
)
def test_runs_pytest_positive(command):
    assert runs_pytest(command)


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf .pytest_cache",
        "pip install pytest",
        "echo pytest",
        "cat pytest.ini",
        "python -m ruff check .",
        "python scripts/check.py",
        "python pytest_helper.py",
        "grep pytest pyproject.toml",
        "",
    ],
)
def test_runs_pytest_negative(command):
    assert not runs_pytest(command)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cat README.md", ["README.md"]),
        ("cat ./AGENTS.md docs/testing.md", ["AGENTS.md", "docs/testing.md"]),
        ("head -n 40 taskapp/app.py", ["taskapp/app.py"]),
        ("head -40 taskapp/app.py", ["taskapp/app.py"]),
        ("tail -n +5 ./taskapp/registry.py", ["taskapp/registry.py"]),
        ("less docs/style.md", ["docs/style.md"]),
        ("more docs/style.md", ["docs/style.md"]),
        ("bat -l python --line-range 1:20 taskapp/app.py", ["taskapp/app.py"]),
        ("sed -n '1,80p' ./docs/errors.md", ["docs/errors.md"]),
        ("sed -n -e 10p taskapp/app.py", ["taskapp/app.py"]),
        ("nl -ba taskapp/app.py", ["taskapp/app.py"]),
        ("cat README.md 2>/dev/null | head -5", ["README.md"]),
        ("cd docs && cat models.md", ["models.md"]),
        ("bash -c 'cat CONTRIBUTING.md'", ["CONTRIBUTING.md"]),
        ("cat a.md; cat a.md", ["a.md", "a.md"]),
        # Not reads: an in-place sed edit, sed without -n, heredoc writes, piped input, other programs.
        ("sed -i 's/a/b/' taskapp/app.py", []),
        ("sed 's/a/b/' taskapp/app.py", []),
        ("sed -n p", []),
        ("cat > notes.md <<'EOF'\nhello world\nEOF", []),
        ("cat -", []),
        ("grep x README.md | head -3", []),
        ("python scripts/check.py", []),
        ("vim README.md", []),
    ],
)
def test_read_paths(command, expected):
    assert read_paths(command) == expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("README.md", True),
        ("./AGENTS.md", True),
        ("CONTRIBUTING.md", True),
        ("CLAUDE.md", True),
        ("docs/testing.md", True),
        ("docs/sub/page.md", True),
        ("taskapp/README.md", False),
        ("readme.md", False),
        ("scripts/check.py", False),
        ("mydocs/x.md", False),
        ("tasks/t5_migration/skill/SKILL.md", False),
    ],
)
def test_is_doc(path, expected):
    assert is_doc(path) is expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("SKILL.md", True),
        (".pi/skills/migration/SKILL.md", True),
        ("skills/x/SKILL.md", True),
        ("skill.md", False),
        ("docs/SKILLS.md", False),
        ("README.md", False),
    ],
)
def test_is_skill(path, expected):
    assert is_skill(path) is expected


@pytest.mark.parametrize(
    "command",
    ["'", '"', "\\", "(((", "|||", "&& ;;", "<<", "cat <<EOF", "a\x00b", "$(", "`", "x=1", "bash -c"],
)
def test_never_raises(command):
    for function in (segments, is_search, runs_check_script, runs_pytest, read_paths):
        function(command)

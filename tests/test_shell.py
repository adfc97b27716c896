"""Shell-command analysis: what counts as searching, running the gate, running pytest, reading.

The gate, the tests and the docs are the pack's: the built-in pack's (a Python gate script) and the
notes-js pack's (`npm run check`, node's test runner).
"""

import pytest
from builtin_pack import BUILTIN

from rig.packs.manifest import load_pack
from rig.paths import REPO_ROOT
from rig.schema import Metrics
from rig.session.shell import (
    is_doc,
    is_search,
    is_skill,
    judge,
    read_paths,
    runs_gate,
    runs_pytest,
    runs_tests,
    segments,
)

NOTES_JS = load_pack(REPO_ROOT / "packs" / "notes-js").spec
GATE = BUILTIN.spec.gate


def runs_check_script(command: str) -> bool:
    """Whether `command` runs the built-in pack's gate."""
    return runs_gate(command, GATE)


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
        # However the gate is spelled: runners, wrappers, shells, `cd` and module forms.
        "uv run python scripts/check.py",
        "uv run scripts/check.py --json",
        "uv run --with ruff --python 3.11 python scripts/check.py",
        "uv run --directory sub python ../scripts/check.py",
        "uv --directory=sub run python ../scripts/check.py",
        "poetry run python scripts/check.py",
        "poetry -C . run python3 scripts/check.py",
        "pipenv run python scripts/check.py",
        "pdm run python scripts/check.py",
        "conda run -n base python scripts/check.py",
        "cd sub && python ../scripts/check.py",
        "cd scripts && python check.py --json",
        "cd taskapp; cd .. && python3 scripts/check.py",
        "cd ~/ws && python scripts/check.py",
        "python -m scripts.check",
        "python3 -m scripts.check --json",
        "cd scripts && python -m check",
        "uv run -m scripts.check",
        "uv run --module=scripts.check",
        "env X=1 python scripts/check.py",
        "env -i PATH=/usr/bin python3 scripts/check.py",
        "env -C sub python ../scripts/check.py",
        "/usr/bin/env python3 scripts/check.py",
        "bash -lc 'python scripts/check.py'",
        "bash -lc 'cd sub && python ../scripts/check.py'",
        "sh -c 'python3 scripts/check.py --json'",
        "timeout 300 uv run python scripts/check.py",
        "timeout -s KILL -k 5 60 python scripts/check.py",
        "uv run bash -c 'python scripts/check.py'",
        "nice -n 10 python scripts/check.py",
        "nice python3 scripts/check.py",
        "ionice -c 3 python scripts/check.py",
        "stdbuf -oL python scripts/check.py",
        "exec python scripts/check.py",
        "nohup python scripts/check.py > log 2>&1",
        "eval 'python scripts/check.py'",
        "source .venv/bin/activate && python scripts/check.py",
        "pypy3 scripts/check.py",
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
        "grep check.py -r .",
        "grep -rn 'scripts/check.py' docs",
        "uv run ruff check scripts/check.py",
        "uv run pytest scripts/check.py",
        "uv pip install -e .",
        "cd sub && cat ../scripts/check.py",
        "cd scripts && python gen_models.py",
        "cd elsewhere && python check.py",
        "python -m scripts.gen_models",
        "bash -lc 'cat scripts/check.py'",
        "echo uv run python scripts/check.py",
        "env python -c 'print(1)' scripts/check.py",
        "command -v python scripts/check.py",
        "timeout 60 cat scripts/check.py",
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
        "uv run pytest -q",
        "uv run -m pytest",
        "uv run --module pytest -x",
        "uv run python -m pytest tests/unit",
        "poetry run pytest",
        "pdm run pytest -q",
        "conda run -n base pytest",
        "env PYTHONPATH=. python3 -m pytest",
        "bash -lc 'cd tests && pytest -q'",
        "nice -n 5 pytest",
        "timeout -k 5 60 pytest",
        "eval pytest",
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
        "command -v pytest",
        "which pytest",
        "uv pip install pytest",
        "uv add --dev pytest",
        "poetry add pytest",
        "uv run ruff check .",
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
        # Paths are resolved against the `cd`s before them.
        ("cd docs && cat models.md", ["docs/models.md"]),
        ("cd docs; cd ..; cat ./README.md", ["README.md"]),
        ("cat docs/../AGENTS.md", ["AGENTS.md"]),
        ("cd /ws && cat README.md", ["/ws/README.md"]),
        ("env -C docs cat errors.md", ["docs/errors.md"]),
        ("sh -c 'cd docs && head -5 style.md'", ["docs/style.md"]),
        # Where a `cd` cannot be followed, the path stays as written.
        ("cd ~/ws && cat README.md", ["README.md"]),
        ("timeout 5 cat README.md", ["README.md"]),
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
    ("command", "output", "expected"),
    [
        ("cat does-not-exist.txt", "cat: does-not-exist.txt: No such file or directory\n", []),
        ("cat a.md missing.md", "# A\ncat: missing.md: No such file or directory\n", ["a.md"]),
        ("head -n 5 x.py", "head: cannot open 'x.py' for reading: No such file or directory", []),
        ("tail -3 ./x.py", "tail: cannot open './x.py' for reading: No such file or directory", []),
        ("sed -n 1,5p gone.md", "sed: can't read gone.md: No such file or directory", []),
        ("bat gone.md", "[bat error]: 'gone.md': No such file or directory (os error 2)", []),
        ("cat docs", "cat: docs: Is a directory", []),
        ("cat secret.md", "cat: secret.md: Permission denied", []),
        ("cd docs && cat gone.md || true", "cat: gone.md: No such file or directory", []),
        # Pi's and Codex's bash results: the command's stderr, then the harness's own lines.
        (
            "cat does-not-exist.txt",
            "cat: does-not-exist.txt: No such file or directory\n\nCommand exited with code 1",
            [],
        ),
        # Another file's error does not make this one unread, even when one name ends the other.
        ("cat a.md", "cat: data.md: No such file or directory", ["a.md"]),
        ("cat README.md", "# README\nNo such file or directory is a common error.", ["README.md"]),
        ("cat README.md", "", ["README.md"]),
        # An error sent elsewhere cannot be seen: the path stays (the documented limit).
        ("cat missing.md 2>/dev/null", "", ["missing.md"]),
    ],
)
def test_read_paths_leaves_out_files_the_output_reports_unreadable(command, output, expected):
    assert read_paths(command, output) == expected


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
    assert is_doc(path, BUILTIN.spec.docs) is expected


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
    [
        "'",
        '"',
        "\\",
        "(((",
        "|||",
        "&& ;;",
        "<<",
        "cat <<EOF",
        "a\x00b",
        "$(",
        "`",
        "x=1",
        "bash -c",
        "eval",
        "cd",
        "cd -- && popd && cat x",
        "env -C",
        "env --chdir=",
        "uv",
        "uv run",
        "uv run -m",
        "uv run --module=",
        "uv run --directory",
        "timeout",
        "timeout -s",
        "command -v",
        "nice -n",
        "env env env env env env env env env env python scripts/check.py",
    ],
)
def test_never_raises(command):
    for function in (segments, is_search, runs_check_script, runs_pytest, read_paths):
        function(command)
    runs_gate(command, NOTES_JS.gate)
    runs_tests(command, NOTES_JS.runner)
    runs_tests(command, BUILTIN.spec.runner)
    read_paths(command, f"{command}: No such file or directory")


@pytest.mark.parametrize(
    "command",
    [
        "npm run check",
        "npm run check -- --json",
        "npm run --silent check -- --json",
        "npm run -s check",
        "/usr/local/bin/npm run check 2>&1 | tail",
        "cd test && npm run check",
        "timeout 120 npm run check",
        "bash -lc 'npm run check'",
        "node scripts/check.mjs",
        "node scripts/check.mjs --json",
        "node --enable-source-maps scripts/check.mjs",
        "node -r ./x.cjs scripts/check.mjs",
        "cd scripts && node check.mjs",
        "cd test && node ../scripts/check.mjs",
        "./scripts/check.mjs",
        "nodejs ./scripts/check.mjs",
    ],
)
def test_node_pack_gate_positive(command):
    assert runs_gate(command, NOTES_JS.gate)


@pytest.mark.parametrize(
    "command",
    [
        "cat scripts/check.mjs",
        "grep -n stage scripts/check.mjs",
        "echo npm run check",
        "npm run lint",
        "npm run checkout",
        "npm test",
        "npm run gen-models",
        "node scripts/gen-models.mjs scripts/check.mjs",
        "node -e 'import(\"./scripts/check.mjs\")'",
        "node --test test/",
        "python scripts/check.py",
        "cd elsewhere && node check.mjs",
        "",
    ],
)
def test_node_pack_gate_negative(command):
    assert not runs_gate(command, NOTES_JS.gate)


@pytest.mark.parametrize(
    "command",
    [
        "node --test test/",
        "node --test",
        "node --test --test-reporter spec test/unit/pagination.test.mjs",
        "cd test && node --test",
        "npm test",
        "npm test -- --test-name-pattern=page",
        "npm run test",
        "npm run --silent test",
        "timeout 60 npm test",
    ],
)
def test_node_pack_tests_positive(command):
    assert runs_tests(command, NOTES_JS.runner)


@pytest.mark.parametrize(
    "command",
    [
        "node test/unit/pagination.test.mjs",
        "node scripts/check.mjs --test",
        "cat test/unit/pagination.test.mjs",
        "npm run check",
        "npm install",
        "echo npm test",
        "pytest",
        "python -m pytest",
        "",
    ],
)
def test_node_pack_tests_negative(command):
    assert not runs_tests(command, NOTES_JS.runner)


def test_a_gate_named_by_its_path_runs_only_by_that_path():
    gate = GATE.model_copy(update={"command": ["./gate.sh", "--all"], "scripts": []})
    assert runs_gate("./gate.sh --all", gate) and runs_gate("gate.sh --all -v", gate)
    assert not runs_gate("vendor/gate.sh --all", gate) and not runs_gate("./gate.sh", gate)


def test_a_pytest_pack_runs_its_tests_with_pytest_alone():
    runner = BUILTIN.spec.runner
    assert runs_tests("python -m pytest -q tests/unit", runner)
    assert runs_tests("cd tests && py.test", runner)
    assert not runs_tests("node --test test/", runner)
    assert not runs_tests("npm test", runner)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("README.md", True),
        ("./AGENTS.md", True),
        ("docs/testing.md", True),
        ("docs/api/notes.md", True),
        ("package.json", False),
        ("scripts/check.mjs", False),
        ("src/README.md", False),
    ],
)
def test_is_doc_follows_the_packs_globs(path, expected):
    assert is_doc(path, NOTES_JS.docs) is expected


def test_is_doc_glob_crosses_folders():
    assert is_doc("guide/a/b/c.md", ["guide/*.md"])
    assert is_doc("src/notes/README.md", ["*README.md"])
    assert not is_doc("guide/a.txt", ["guide/*.md"])
    assert not is_doc("README.md", [])


def test_judge_fills_the_packs_fields_from_what_the_parser_recorded():
    parsed = Metrics(
        read_paths=["AGENTS.md", "src/notes.mjs", "docs/testing.md", "scripts/check.mjs"],
        bash_commands=["cat scripts/check.mjs", "npm run check -- --json", "node --test test/"],
        ran_pytest=True,
    )
    judged = judge(parsed, NOTES_JS)
    assert judged.docs_read == ["AGENTS.md", "docs/testing.md"]
    assert judged.ran_check_script and judged.ran_tests
    # What the parser decided is left alone, and the parsed metrics are not changed.
    assert judged.ran_pytest and judged.read_paths == parsed.read_paths
    assert parsed.docs_read == [] and not parsed.ran_check_script and not parsed.ran_tests
    # The same session judged against the built-in pack: neither its gate nor its tests ran.
    builtin = judge(parsed, BUILTIN.spec)
    assert builtin.docs_read == ["AGENTS.md", "docs/testing.md"]
    assert not builtin.ran_check_script and not builtin.ran_tests


def test_judge_counts_only_what_ran():
    judged = judge(Metrics(bash_commands=["cat scripts/check.mjs", "ls test"]), NOTES_JS)
    assert not judged.ran_check_script and not judged.ran_tests and judged.docs_read == []

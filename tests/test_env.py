"""A pack's project environment ([environment], rig/env/): built once with uv from a real small
project (setuptools, src layout, an extra), cached, locked, built once by concurrent builders, and
refused in one line when it cannot be built. Offline: uv installs from build/wheels (make setup-dev)."""

import functools
import hashlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from env_pack import MANIFEST, RIG, WHEELS, make_pack, offline, rig
from processes import background_job, interrupt, running, wait_for

from rig.env.activate import activate
from rig.env.network import index_endpoints
from rig.env.uvtool import EnvError, uv_bin
from rig.packs.manifest import PackError, load_pack
from rig.paths import REPO_ROOT
from rig.schema import Placement
from rig.verify.checks import run_check, run_hidden
from rig.workspace.build import copy_fixture


def entries(cache: Path) -> set[str]:
    """The environments (folders) in the cache."""
    return {p.name for p in cache.iterdir() if p.is_dir()} if cache.is_dir() else set()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str], Path]:
    """One offline build shared by the tests that read it: (pack, cache, env, environment path)."""
    tmp = tmp_path_factory.mktemp("env")
    pack, cache = make_pack(tmp / "pack"), tmp / "envs"
    env = offline(cache)
    proc = rig(env, "env", "build", str(pack))
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and "built in" in proc.stdout
    (path,) = entries(cache)
    return pack, cache, env, cache / path


def test_the_environment_table_is_optional_and_validated(tmp_path: Path) -> None:
    assert load_pack(REPO_ROOT / "packs" / "notes-js").spec.environment is None, "optional"
    assert load_pack(None).spec.environment is not None, "the built-in pack's gate tools come from one"
    for body, where in (
        ('python = "3.11"\n', "environment.python"),
        ('extras = ["test"]\nproject = false\n', "environment"),
        ('requirements = ["../outside.txt"]\n', "environment"),
        ('lock = "uv.lock"\nrequirements = ["r.txt"]\n', "environment"),
        ('extras = ["not an extra"]\n', "environment.extras.0"),
        ('env = { "1BAD" = "x" }\n', "environment.env"),
        ("colour = 3\n", "environment.colour"),
    ):
        root = make_pack(tmp_path / f"p{len(list(tmp_path.iterdir()))}", body)
        with pytest.raises(PackError) as err:
            load_pack(root)
        message = str(err.value)
        assert "\n" not in message and f": {where}" in message, message
    spec = load_pack(make_pack(tmp_path / "good", 'python = ">=3.11, <4"\ngroups = ["dev"]\n')).spec
    assert spec.environment is not None and spec.environment.pretend_version is True


def test_build_installs_the_project_and_its_extra(built: tuple[Path, Path, dict[str, str], Path]) -> None:
    pack, _cache, _env, path = built
    probe = (
        "import envproject, iniconfig, dateutil; print(envproject.__file__, envproject.next_month_days(3))"
    )
    # The project imports from a tree's source roots only (here the pack's fixture): its metadata
    # is installed, its editable import hooks are not.
    fixture = pack / "fixture"
    roots = {**os.environ, "PYTHONPATH": str(fixture / "src")}
    python = str(path / "bin" / "python")
    proc = subprocess.run([python, "-c", probe], capture_output=True, text=True, env=roots)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(fixture / "src" / "envproject" / "__init__.py"), "4"]
    metadata = "import importlib.metadata as m; print(m.version('envproject'))"
    proc = subprocess.run([python, "-c", metadata], capture_output=True, text=True)
    assert proc.stdout.strip() == "0.1.0", proc.stderr
    shown = subprocess.run(
        [uv_bin(), "pip", "show", "--python", python, "envproject"], capture_output=True, text=True
    )
    assert "Version: 0.1.0" in shown.stdout, shown.stdout + shown.stderr
    # Sealed: no file of the project's sources or tests is anywhere in the environment, which every
    # agent can read; the tree it was built from holds the fix of every task older than it.
    sources = {p.relative_to(fixture / "src").parts for p in (fixture / "src").rglob("*.py")}
    assert ("envproject", "__init__.py") in sources and not (path / "project").exists()
    copies = [p for p in path.rglob("*.py") if p.parts[-2:] in sources]
    assert not copies, copies
    proc = subprocess.run([python, "-c", "import envproject"], capture_output=True, text=True)
    assert "No module named 'envproject'" in proc.stderr, "the pristine copy must not stand in for a tree"
    lock = (pack / "environment.lock.txt").read_text()
    assert "iniconfig==2.3.1" in lock and "six==1.17.0" in lock and "--hash=sha256:" in lock
    assert not list((pack / "fixture").rglob("*.egg-info")), "the editable install wrote into the fixture"


def test_a_second_build_is_a_cache_hit(built: tuple[Path, Path, dict[str, str], Path]) -> None:
    pack, cache, env, path = built
    log = cache / f"{path.name}.log"
    before = {p: p.stat().st_mtime_ns for p in (log, path / ".rig-env.json", path / "bin" / "python")}
    text = log.read_text()
    proc = rig(env, "env", "build", str(pack))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"cached: {path} ")
    assert {p: p.stat().st_mtime_ns for p in before} == before and log.read_text() == text
    assert entries(cache) == {path.name}


def test_show_names_hash_path_and_packages(built: tuple[Path, Path, dict[str, str], Path]) -> None:
    pack, _cache, env, path = built
    proc = rig(env, "env", "show", str(pack), "--json")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert (shown["hash"], shown["path"], shown["built"]) == (path.name, str(path), True)
    assert {"iniconfig==2.3.1", "python-dateutil==2.9.0.post0", "six==1.17.0"} <= set(shown["packages"])
    assert shown["size_bytes"] > 0


def test_concurrent_builds_build_once(tmp_path: Path) -> None:
    pack, cache = make_pack(tmp_path / "pack"), tmp_path / "envs"
    env = offline(cache)
    builders = [
        subprocess.Popen([RIG, "env", "build", str(pack)], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    try:
        outputs = [b.communicate(timeout=300)[0] for b in builders]
    finally:
        for builder in builders:
            builder.kill()
            builder.wait()
    assert [b.returncode for b in builders] == [0, 0], outputs
    assert sorted(out.splitlines()[-1].split(" ")[0] for out in outputs) == ["built", "cached:"], outputs
    (path,) = entries(cache)
    assert (cache / f"{path}.log").read_text().count("[venv]") == 1
    assert sum(out.startswith("wrote ") for out in outputs) == 1, "the lock is resolved once"


@pytest.mark.parametrize(
    ("setup", "said"),
    [("echo half; exit 3", "exited 3"), ("no-such-tool-for-rig --version", "not found")],
)
def test_a_failing_setup_leaves_nothing_in_the_cache(tmp_path: Path, setup: str, said: str) -> None:
    pack, cache = (
        make_pack(tmp_path / "pack", f'extras = ["test"]\nsetup = [{json.dumps(setup)}]\n'),
        tmp_path / "envs",
    )
    proc = rig(offline(cache), "env", "build", str(pack))
    assert proc.returncode == 2 and proc.stdout.count("\n") <= 1
    (line,) = proc.stderr.splitlines()
    assert "at step setup" in line and json.dumps(setup)[1:-1] in line and said in line, line
    log = Path(line.rsplit("log: ", 1)[1])
    assert log.is_file() and "[setup]" in log.read_text()
    assert entries(cache) == set(), "a half-built environment was left in the cache"


def test_a_hung_setup_step_is_stopped_at_its_time_limit(tmp_path: Path) -> None:
    # Long enough for the install steps before it even on a loaded machine; the setup line outlasts it.
    pack, cache = make_pack(tmp_path / "pack", 'setup = ["sleep 600"]\n'), tmp_path / "envs"
    proc = rig(offline(cache, RIG_ENV_STEP_TIMEOUT_S="12"), "env", "build", str(pack))
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert "at step setup" in line and "took longer than 12 s" in line and "log: " in line, line
    assert entries(cache) == set(), "a half-built environment was left in the cache"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_build_says_so_in_one_line_and_leaves_nothing(tmp_path: Path, signum: int) -> None:
    # Started as a background job would be (SIGINT ignored): the command handles both signals itself.
    marker = f"{os.getpid() % 1000}{signum}424"
    pack, cache = make_pack(tmp_path / "pack", f'setup = ["sleep {marker}"]\n'), tmp_path / "envs"
    proc = subprocess.Popen(
        [RIG, "env", "build", str(pack)],
        env=offline(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=background_job,
    )
    try:
        wait_for(marker, proc, 120)
        _out, err = interrupt(proc, 30, signum)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    (line,) = err.splitlines()
    assert line == "error: interrupted; nothing half-built was kept; rerun to build", line
    assert entries(cache) == set(), "a half-built environment was left in the cache"
    assert not running(marker), "the setup step outlived the build"


def test_a_lock_that_does_not_match_is_refused(
    built: tuple[Path, Path, dict[str, str], Path], tmp_path: Path
) -> None:
    pack, _cache, _env, _path = built
    changed = make_pack(tmp_path / "pack", "")  # the extra `test` no longer asked for
    shutil.copy(pack / "environment.lock.txt", changed / "environment.lock.txt")
    cache = tmp_path / "envs"
    proc = rig(offline(cache), "env", "build", str(changed))
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert "does not match the pack's dependencies" in line and "delete it" in line, line
    assert entries(cache) == set()


def test_a_lock_with_a_wrong_hash_fails_at_install(
    built: tuple[Path, Path, dict[str, str], Path], tmp_path: Path
) -> None:
    pack, _cache, _env, _path = built
    tampered = make_pack(tmp_path / "pack")
    lock = (pack / "environment.lock.txt").read_text()
    digest = lock.split("iniconfig==2.3.1 \\\n    --hash=sha256:", 1)[1][:64]
    (tampered / "environment.lock.txt").write_text(lock.replace(digest, "0" * 64))
    cache = tmp_path / "envs"
    proc = rig(offline(cache), "env", "build", str(tampered))
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert "at step install lock" in line and "--require-hashes" in line and "log: " in line, line
    assert entries(cache) == set()


def test_a_missing_interpreter_and_an_unreachable_index_are_one_line(tmp_path: Path) -> None:
    cache = tmp_path / "envs"
    proc = rig(offline(cache), "env", "build", str(make_pack(tmp_path / "old", 'python = "==2.7.*"\n')))
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert "no Python matching '==2.7.*'" in line, line
    env = {k: v for k, v in offline(cache).items() if k not in ("UV_OFFLINE", "RIG_WHEELS")}
    # Nothing listens on port 9 of loopback: the index refuses every connection.
    env.update(UV_INDEX_URL="http://127.0.0.1:9/simple", UV_HTTP_RETRIES="0")
    proc = rig(env, "env", "build", str(make_pack(tmp_path / "pack")))
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert "at step resolve" in line and "uv pip compile" in line and "log: " in line, line
    assert entries(cache) == set() and not (tmp_path / "pack" / "environment.lock.txt").exists()


def test_prune_keeps_the_newest(built: tuple[Path, Path, dict[str, str], Path], tmp_path: Path) -> None:
    _pack, _cache, _env, path = built
    cache = tmp_path / "envs"
    manifest = json.loads((path / ".rig-env.json").read_text())
    for name, when in (("old", "2026-01-01T00:00:00+00:00"), ("new", "2026-06-01T00:00:00+00:00")):
        (cache / name).mkdir(parents=True)
        (cache / name / ".rig-env.json").write_text(json.dumps({**manifest, "hash": name, "built_at": when}))
        (cache / f"{name}.log").write_text("log\n")
    (cache / "halfbuilt").mkdir()
    proc = rig({**os.environ, "RIG_ENV_DIR": str(cache)}, "env", "prune", "--keep", "1")
    assert proc.returncode == 0, proc.stderr
    assert entries(cache) == {"new"} and not (cache / "old.log").exists()
    assert "2 environment(s) removed" in proc.stdout


def test_a_half_built_environment_is_never_used_and_is_rebuilt(
    built: tuple[Path, Path, dict[str, str], Path], tmp_path: Path
) -> None:
    pack, _cache, _env, path = built
    copy, cache = make_pack(tmp_path / "pack"), tmp_path / "envs"
    shutil.copy(pack / "environment.lock.txt", copy / "environment.lock.txt")
    env = offline(cache)
    shown = json.loads(rig(env, "env", "show", str(copy), "--json").stdout)
    assert shown["hash"] == path.name, "the same table, project, lock and interpreter: the same identity"
    # What a builder killed after `uv venv` leaves: a folder without its manifest.
    leftover = Path(shown["path"])
    (leftover / "bin").mkdir(parents=True)
    (leftover / "bin" / "python").write_text("#!/bin/sh\nexit 99\n")
    proc = rig(env, "env", "show", str(copy))
    assert proc.returncode == 1 and "not built" in proc.stdout
    proc = rig(env, "env", "build", str(copy))
    assert proc.returncode == 0 and proc.stdout.startswith("built in"), proc.stderr
    roots = {**os.environ, "PYTHONPATH": str(copy / "fixture" / "src")}
    probe = subprocess.run(
        [str(leftover / "bin" / "python"), "-c", "import envproject, iniconfig"], check=False, env=roots
    )
    assert probe.returncode == 0


def test_a_dependency_group_and_a_requirements_file_without_the_project(tmp_path: Path) -> None:
    body = 'project = false\ngroups = ["check"]\nrequirements = ["requirements.txt"]\n'
    pack, cache = make_pack(tmp_path / "pack", body), tmp_path / "envs"
    (pack / "fixture" / "requirements.txt").write_text("six>=1.16\n")
    proc = rig(offline(cache), "env", "build", str(pack))
    assert proc.returncode == 0, proc.stderr
    (path,) = entries(cache)
    python = str(cache / path / "bin" / "python")
    assert subprocess.run([python, "-c", "import iniconfig, six"], check=False).returncode == 0
    imported = subprocess.run([python, "-c", "import envproject"], check=False, capture_output=True)
    assert imported.returncode == 1, "project = false installs no project"
    lock = (pack / "environment.lock.txt").read_text()
    assert "iniconfig==2.3.1" in lock and "six==1.17.0" in lock and "dateutil" not in lock
    assert str(tmp_path) not in lock, "the lock names no machine's folders"


def test_resolving_a_project_whose_version_comes_from_git_gets_the_pretended_version(tmp_path: Path) -> None:
    # A setup.py-only project, as older ones are: its metadata is made by running it, and its
    # version comes from git (setuptools-scm), which a tree without .git has not.
    pack, cache = make_pack(tmp_path / "pack", "pretend_version = true\n"), tmp_path / "envs"
    fixture = pack / "fixture"
    (fixture / "pyproject.toml").unlink()
    (fixture / "setup.py").write_text(
        "import os\n\nfrom setuptools import find_packages, setup\n\n"
        "version = os.environ.get('SETUPTOOLS_SCM_PRETEND_VERSION')\n"
        "if not version:\n    raise LookupError('setuptools-scm was unable to detect version')\n"
        "setup(name='envproject', version=version, package_dir={'': 'src'},\n"
        "      packages=find_packages('src'), install_requires=['six'])\n"
    )
    proc = rig(offline(cache), "env", "build", str(pack))
    assert proc.returncode == 0, proc.stderr
    assert "six==1.17.0" in (pack / "environment.lock.txt").read_text()


def test_a_setup_py_projects_dependencies_are_part_of_its_identity(tmp_path: Path) -> None:
    # python-slugify's older commits name Unidecode in setup.py, its newer ones text-unidecode: a
    # base whose setup.py differs from the fixture's must not share the fixture's environment.
    pack, cache = make_pack(tmp_path / "pack", "project = true\n"), tmp_path / "envs"
    fixture = pack / "fixture"
    (fixture / "pyproject.toml").unlink()
    script = (
        "from setuptools import find_packages, setup\n\n"
        "setup(name='envproject', version='1.0', package_dir={'': 'src'},\n"
        "      packages=find_packages('src'), install_requires=[%s])\n"
    )
    (fixture / "setup.py").write_text(script % "'six'")
    env = offline(cache)
    first = rig(env, "env", "build", str(pack))
    assert first.returncode == 0, first.stderr
    assert "six==1.17.0" in (pack / "environment.lock.txt").read_text()
    (fixture / "setup.py").write_text(script % "")
    stale = rig(env, "env", "build", str(pack))
    assert stale.returncode == 2 and "does not match the pack's dependencies" in stale.stderr, stale.stderr
    (pack / "environment.lock.txt").unlink()
    again = rig(env, "env", "build", str(pack))
    assert again.returncode == 0, again.stderr
    assert "six" not in (pack / "environment.lock.txt").read_text()
    assert len(entries(cache)) == 2


def test_setup_cfg_beside_a_static_project_table_is_no_part_of_its_identity(tmp_path: Path) -> None:
    # arrow's setup.cfg holds only tool settings; its dependencies are in [project].
    pack, cache = make_pack(tmp_path / "pack", "project = true\n"), tmp_path / "envs"
    setup_cfg = pack / "fixture" / "setup.cfg"
    setup_cfg.write_text("[flake8]\nmax-line-length = 100\n")
    env = offline(cache)
    first = rig(env, "env", "build", str(pack))
    assert first.returncode == 0, first.stderr
    setup_cfg.write_text("[flake8]\nmax-line-length = 120\n")
    again = rig(env, "env", "build", str(pack))
    assert again.returncode == 0, again.stderr
    assert len(entries(cache)) == 1


class _Says(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = f"served {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


FETCH = (
    'python -c "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=10).read().decode())" '
    "{url} > {out} 2>&1 || echo refused >> {out}"
)


def test_a_build_reaches_only_the_configured_index(tmp_path: Path) -> None:
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Says) for _ in range(2)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        index, other = (f"127.0.0.1:{s.server_address[1]}" for s in servers)
        setup = [
            FETCH.format(url=f"http://{index}/simple/", out="index.txt"),
            FETCH.format(url=f"http://{other}/secret", out="other.txt"),
        ]
        pack = make_pack(tmp_path / "pack", f'extras = ["test"]\nsetup = {json.dumps(setup)}\n')
        cache = tmp_path / "envs"
        proc = rig(offline(cache, RIG_ENV_ALLOW=index), "env", "build", str(pack))
        assert proc.returncode == 0, proc.stderr
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    (path,) = [cache / name for name in entries(cache)]
    # Through the egress proxy: the request names the whole URL.
    assert (path / "index.txt").read_text().strip() == f"served http://{index}/simple/"
    said = (path / "other.txt").read_text()
    assert "served" not in said and "refused" in said, said
    log = (cache / f"{path.name}.log").read_text()
    assert f"allowed: pypi.org:443, files.pythonhosted.org:443, {index}" in log
    attempts = [json.loads(line) for line in (cache / f"{path.name}.network.jsonl").read_text().splitlines()]
    assert {(a["host"], a["port"], a["allowed"]) for a in attempts} >= {
        ("127.0.0.1", servers[0].server_address[1], True),
        ("127.0.0.1", servers[1].server_address[1], False),
    }, attempts


def test_the_allowed_hosts_are_the_configured_indexes() -> None:
    assert index_endpoints({}) == ["pypi.org:443", "files.pythonhosted.org:443"]
    configured = {
        "UV_INDEX_URL": "https://mirror.example/simple",
        "UV_INDEX": "internal=http://10.0.0.5:8080/simple other=https://pkgs.example/x",
        "UV_FIND_LINKS": "/opt/wheels,https://wheels.example/",
        "RIG_ENV_ALLOW": "files.mirror.example:443",
    }
    assert index_endpoints(configured) == [
        "mirror.example:443",
        "10.0.0.5:8080",
        "pkgs.example:443",
        "wheels.example:443",
        "files.mirror.example:443",
    ]
    with pytest.raises(EnvError, match=r"^\$RIG_ENV_ALLOW: 'nohost' is not host:port"):
        index_endpoints({"RIG_ENV_ALLOW": "nohost"})


def _simple_index(root: Path) -> Path:
    """build/wheels as a PEP 503 simple index under `root`: a page per project, linking its wheels
    with their sha256."""
    by_project: dict[str, list[Path]] = {}
    for wheel in sorted(WHEELS.glob("*.whl")):
        project = wheel.name.split("-", 1)[0].lower().replace("_", "-")
        by_project.setdefault(project, []).append(wheel)
    for project, wheels in by_project.items():
        page = root / "simple" / project
        page.mkdir(parents=True)
        links = "".join(
            f'<a href="{w.as_uri()}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a>\n'
            for w in wheels
        )
        (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return root


INICONFIG = """import configparser

WHERE = "the tree"


class ParseError(Exception):
    pass


class IniConfig:
    def __init__(self, path, data=None):
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(path)
        self.sections = {name: dict(parser[name]) for name in parser.sections()}

    def __contains__(self, name):
        return name in self.sections

    def __getitem__(self, name):
        return SectionWrapper(self, name)


class SectionWrapper:
    def __init__(self, config, name):
        self.values = config.sections[name]

    def items(self):
        return self.values.items()
"""
# A project its own test tool depends on (pytest requires iniconfig), with its own uv.lock.
SELF_DEPENDENT = {
    "pyproject.toml": '[project]\nname = "iniconfig"\nversion = "2.9.0"\n\n'
    '[dependency-groups]\ntest = ["pytest"]\n\n'
    '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n',
    # What pytest uses of it (reading its -c ini file), as the tree defines it.
    "src/iniconfig/__init__.py": INICONFIG,
    "tests/test_where.py": "import iniconfig\n\n\ndef test_the_trees_own_code_is_imported():\n"
    '    assert iniconfig.WHERE == "the tree"\n',
}


def test_a_project_its_test_tools_depend_on_builds_from_its_lock_and_gates_its_tree(tmp_path: Path) -> None:
    """Its uv.lock, exported with hashes and without the project, once asked the index for the
    project itself ("Hash-checking is required, but no trusted hash was provided for: iniconfig"):
    no environment. Now the lock installs, and the gate's and the hidden tests' pytest run on the
    tree's own iniconfig."""
    pack = tmp_path / "pack"
    for rel, text in SELF_DEPENDENT.items():
        (pack / "fixture" / rel).parent.mkdir(parents=True, exist_ok=True)
        (pack / "fixture" / rel).write_text(text)
    for folder in ("tasks", "hidden_tests"):
        (pack / folder).mkdir()
    # Locked as a real project is, with each wheel's hash: from an index (build/wheels served on
    # 127.0.0.1 as a simple index whose links carry their sha256), named in pyproject.toml so that
    # the build's export finds the lock current.
    index = _simple_index(tmp_path / "index")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(index))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/simple"
        with (pack / "fixture" / "pyproject.toml").open("a") as pyproject:
            pyproject.write(f'\n[[tool.uv.index]]\nname = "here"\nurl = "{url}"\ndefault = true\n')
        environ = {**offline(tmp_path / "envs"), "UV_OFFLINE": "0"}
        locked = subprocess.run(
            [str(uv_bin()), "lock"],
            cwd=pack / "fixture",
            capture_output=True,
            text=True,
            timeout=120,
            env=environ,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert locked.returncode == 0, locked.stderr
    assert 'name = "pytest"' in (pack / "fixture" / "uv.lock").read_text()
    (pack / "pack.toml").write_text(
        MANIFEST.replace("envproject", "iniconfig")
        + '[environment]\nproject = true\nlock = "uv.lock"\ngroups = ["test"]\n'
    )
    cache = tmp_path / "envs"
    built = rig(offline(cache), "env", "build", str(pack))
    assert built.returncode == 0, built.stdout + built.stderr
    loaded = load_pack(pack)
    work = copy_fixture(loaded.fixture_dir, tmp_path / "work")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in offline(cache).items():
            patch.setenv(name, value)
        project_env = activate(loaded)
        outcome = run_check(work, tmp_path / "home", loaded.spec.gate, project_env=project_env)
        # The hidden tests too: their pytest cannot even start before the tree's iniconfig is found.
        hidden = run_hidden(
            work,
            pack / "fixture",
            tmp_path / "j.xml",
            tmp_path / "home",
            loaded.spec.runner,
            project_env=project_env,
            placement=Placement(at="own-paths", tests=("tests/test_where.py",)),
        )
    assert outcome.ok, outcome
    assert hidden.ok and hidden.passed == ["test_where::test_the_trees_own_code_is_imported"], hidden

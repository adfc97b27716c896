"""`rig run`'s preflight, through the real CLI: each failure is one line naming the fix, exit code 2,
and nothing is written (no results folder, no runs root, no workspace); `--preflight-only` runs the
checks alone."""

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

RIG = str(Path(sys.executable).with_name("rig"))
REPO = Path(__file__).resolve().parents[1]
TASK = "t1_fix_pagination"
KEY = "RIG_PREFLIGHT_TEST_KEY"
SECRET = "sk-preflight-test-never-printed"


def rig(tmp: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if k not in (KEY, "RIG_BWRAP", "RIG_CLAUDE_BIN")},
        "RIG_RESULTS_ROOT": str(tmp / "results"),
        "RIG_RUNS_ROOT": str(tmp / "runs"),
        "RIG_CALIBRATION_DIR": str(tmp / "calibration"),
        **extra,
    }
    return subprocess.run([RIG, "run", *args], capture_output=True, text=True, timeout=120, env=env)


def experiment(tmp: Path, body: str, name: str = "pre") -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(
        f'harness = "scripted"\ntasks = ["{TASK}"]\n{body}\n[[conditions]]\nname = "a"\n'
        '[[conditions]]\nname = "b"\nremove_files = ["AGENTS.md"]\n'
    )
    return path


def written(tmp: Path) -> list[str]:
    """What a command left in the folders a run writes."""
    return sorted(str(p) for name in ("results", "runs") for p in (tmp / name).rglob("*")) + [
        name for name in ("results", "runs") if (tmp / name).exists()
    ]


def refused(proc: subprocess.CompletedProcess[str], tmp: Path, *words: str) -> str:
    """The one-line error of a refused run, checked: exit 2, nothing written, no traceback."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert written(tmp) == []
    assert SECRET not in proc.stdout + proc.stderr
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REAL = f'network = "open"\n[provider]\nkind = "real"\nname = "anthropic"\napi_key_env = "{KEY}"\n'


def test_a_missing_key_is_named_not_a_traceback(tmp_path: Path) -> None:
    path = experiment(tmp_path, REAL)
    line = refused(rig(tmp_path, str(path)), tmp_path, f"${KEY} is not set", "export it")
    assert "Traceback" not in line


def test_a_closed_endpoint_is_found_without_a_request(tmp_path: Path) -> None:
    port = closed_port()
    body = REAL.replace('name = "anthropic"', f'name = "anthropic"\nbase_url = "http://127.0.0.1:{port}"')
    proc = rig(tmp_path, str(experiment(tmp_path, body)), **{KEY: SECRET})
    refused(proc, tmp_path, f"127.0.0.1:{port} does not accept a connection", "provider.base_url")


def test_an_open_endpoint_passes_and_the_key_is_never_printed(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        body = REAL.replace('name = "anthropic"', f'name = "anthropic"\nbase_url = "http://127.0.0.1:{port}"')
        proc = rig(tmp_path, str(experiment(tmp_path, body)), "--preflight-only", **{KEY: SECRET})
    assert proc.returncode == 0, proc.stderr
    assert f"key: ${KEY} is set" in proc.stdout
    assert f"endpoint: 127.0.0.1:{port} accepts connections" in proc.stdout
    assert SECRET not in proc.stdout + proc.stderr
    assert written(tmp_path) == []


def test_model_only_needs_an_endpoint_it_knows(tmp_path: Path) -> None:
    """Under the default network policy a known provider is reached at its well-known endpoint, and
    one of unknown name without a base_url is refused before anything runs."""
    confined = REAL.replace('network = "open"\n', "")
    unknown = confined.replace('name = "anthropic"', 'name = "acme"')
    proc = rig(tmp_path, str(experiment(tmp_path, unknown)), **{KEY: SECRET})
    refused(proc, tmp_path, "provider 'acme' has no known endpoint", "provider.base_url", 'network = "open"')
    # The known one passes the policy check; here (no route out) the endpoint check then names it.
    proc = rig(tmp_path, str(experiment(tmp_path, confined)), "--preflight-only", **{KEY: SECRET})
    assert "no known endpoint" not in proc.stdout + proc.stderr
    assert "api.anthropic.com:443" in proc.stdout + proc.stderr


def test_a_missing_harness_cli_is_named(tmp_path: Path) -> None:
    body = REAL.replace('harness = "scripted"', "")
    path = tmp_path / "cc.toml"
    path.write_text(f'harness = "claude-code"\ntasks = ["{TASK}"]\n{body}\n[[conditions]]\nname = "a"\n')
    proc = rig(tmp_path, str(path), RIG_CLAUDE_BIN=str(tmp_path / "no-claude"), **{KEY: SECRET})
    refused(proc, tmp_path, "harness claude-code", "RIG_CLAUDE_BIN", "does not exist", "unset it")


def test_a_required_sandbox_that_cannot_run_is_refused(tmp_path: Path) -> None:
    proc = rig(
        tmp_path,
        str(experiment(tmp_path, "")),
        "--sandbox",
        "require",
        RIG_BWRAP=str(tmp_path / "no-bwrap"),
    )
    refused(proc, tmp_path, "--sandbox require", "bubblewrap not found", "apt-get install bubblewrap")


def test_results_held_by_another_run_are_refused(tmp_path: Path) -> None:
    path = experiment(tmp_path, "", name="held")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom rig.store.results import ResultsStore\n"
            f"with ResultsStore({str(tmp_path / 'results' / 'held')!r}).writer():\n"
            "    print('held', flush=True)\n    sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        before = written(tmp_path)
        proc = rig(tmp_path, str(path))
        after = written(tmp_path)
    finally:
        holder.communicate("\n", timeout=30)
    assert proc.returncode == 2 and "already being run" in proc.stderr and f"pid {holder.pid}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert before == after
    assert not (tmp_path / "runs").exists()


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-task copy of the built-in pack, calibrated by `rig calibrate` into its own pins folder."""
    tmp = tmp_path_factory.mktemp("calibrated")
    pack = tmp / "pack"
    pack.mkdir()
    shutil.copy(REPO / "pack.toml", pack)
    for folder in ("fixtures/taskapp", f"tasks/{TASK}", f"hidden_tests/{TASK}"):
        shutil.copytree(REPO / folder, pack / folder)
    env = {**os.environ, "RIG_CALIBRATION_DIR": str(tmp / "calibration")}
    proc = subprocess.run(
        [RIG, "calibrate", "--pack", str(pack), "--workers", "2"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp


@pytest.mark.slow
def test_a_pack_changed_since_calibration_is_refused(calibrated: Path, tmp_path: Path) -> None:
    pack = calibrated / "pack"
    path = experiment(tmp_path, f'pack = "{pack}"')
    env = {"RIG_CALIBRATION_DIR": str(calibrated / "calibration")}
    proc = rig(tmp_path, str(path), "--preflight-only", **env)
    assert proc.returncode == 0, proc.stderr
    assert "calibration: pack taskapp unchanged since `rig calibrate` of " in proc.stdout

    hidden = next((pack / "hidden_tests" / TASK).glob("test_*.py"))
    original = hidden.read_text()
    hidden.write_text(original + "\n# changed\n")
    try:
        line = refused(rig(tmp_path, str(path), **env), tmp_path, f"the hidden tests of {TASK} changed since")
    finally:
        hidden.write_text(original)
    assert f"rerun `rig calibrate --pack {pack}`" in line

    readme = pack / "fixtures" / "taskapp" / "README.md"
    original = readme.read_text()
    readme.write_text(original + "\nchanged\n")
    try:
        refused(rig(tmp_path, str(path), **env), tmp_path, "pack taskapp: the fixture changed since")
    finally:
        readme.write_text(original)


def test_never_calibrated_is_said_and_every_check_listed(tmp_path: Path) -> None:
    proc = rig(tmp_path, str(experiment(tmp_path, "")), "--preflight-only")
    assert proc.returncode == 0, proc.stderr
    checks = [
        line.split(":")[1].strip() for line in proc.stdout.splitlines() if line.startswith("preflight:")
    ]
    assert checks[:7] == ["key", "harness", "sandbox", "calibration", "results", "space", "endpoint"]
    assert "calibration: never run for pack taskapp on this machine (`rig calibrate` proves its oracle)" in (
        proc.stdout
    )
    assert "preflight: all 7 checks passed" in proc.stdout
    assert written(tmp_path) == []
    assert not (tmp_path / "calibration").exists()

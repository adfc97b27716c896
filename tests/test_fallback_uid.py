"""Without bubblewrap, the agent's uid (issue 39, item 3): real unshare, real relay, real agents.

A user other than root gets a network namespace in a user namespace where the relay is root (to
bring `lo` up); the agent then runs as that user's own uid in a user namespace nested inside, and
cannot change the network namespace. Root's is a plain `unshare --net`, and its agent runs as
uid 0 in a user namespace nested inside: still root to the files it touches (which every record
and `rig doctor` say), but powerless over its network namespace; without the drop it could change
the namespace and leave it.
"""

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from rig.confine.network import Egress, resolve_network
from rig.confine.proc import UNSHARE
from rig.confine.sandbox import AS_ROOT, resolve
from rig.paths import REPO_ROOT
from rig.run.doctor import diagnose

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
# An agent that says who it is, goes out through the egress proxy, then tries to take its network
# namespace's `lo` down (SIOCSIFFLAGS) and to enter the network namespace of the process whose pid
# it is given (setns). Standard library only: it runs with -I -S, as the relay does.
AGENT = r"""
import ctypes, fcntl, json, os, socket, struct, sys
from urllib.parse import urlsplit

seen = {"uid": os.getuid(), "gid": os.getgid()}
proxy = urlsplit(os.environ["HTTPS_PROXY"])
with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as conn:
    conn.sendall(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n")
    seen["proxy"] = conn.recv(1024).split(b"\r\n")[0].decode()
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
    flags = struct.unpack("16sH", fcntl.ioctl(sock, 0x8913, struct.pack("16sH", b"lo", 0))[:18])[1]
    try:
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH", b"lo", flags & ~1))
        seen["lo_down"] = "done"
    except OSError as exc:
        seen["lo_down"] = exc.strerror
outside = f"/proc/{sys.argv[1]}/ns/net"
try:
    fd = os.open(outside, os.O_RDONLY)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, 0x40000000) != 0:
        seen["left"] = os.strerror(ctypes.get_errno())
    else:
        seen["left"] = "done" if os.readlink("/proc/self/ns/net") == os.readlink(outside) else "elsewhere"
except OSError as exc:
    seen["left"] = exc.strerror
print(json.dumps(seen))
"""
# Run as nobody: the plan this user gets, the agent under it (the drop), and under the same plan
# without the drop, as every non-root agent ran before it.
AS_USER = """
import dataclasses, json, os, subprocess, sys
from rig.confine.network import Egress, resolve_network
from rig.confine.sandbox import resolve

agent = [sys.executable, "-I", "-S", "-c", sys.argv[1], str(os.getpid())]
plan, status = resolve_network("model-only", [], sandboxed=False, required=True)
_none, sandbox = resolve("off", [], [])
seen = {"as_user": plan.as_user, "network": status.detail, "sandbox": sandbox.detail}
for name, chosen in (("dropped", plan), ("kept", dataclasses.replace(plan, as_user=None))):
    with Egress(chosen, None) as egress:
        env = {"PATH": "/usr/bin:/bin", **egress.env()}
        done = subprocess.run(egress.wrap(agent), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen[name] = json.loads(done.stdout)
print(json.dumps(seen))
"""


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    """stdout of `argv`, which must exit 0; in a session of its own, killed whole if it does not end."""
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    return out


def _python_for_nobody(cwd: Path) -> tuple[str, dict[str, str]]:
    """An interpreter user nobody can start inside a user namespace, and the environment that gives
    it this venv's packages.

    The relay runs as the rig's own interpreter inside the agent's namespaces. pytest's may lie
    below a folder only root may enter (pyenv's under /root), so the second choice is the system's
    interpreter of the same version, given this checkout and this venv's packages.
    """
    plain = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    packages = [str(REPO_ROOT), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
    candidates = [
        (sys.executable, plain),
        (
            f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}",
            {**plain, "PYTHONPATH": ":".join(packages)},
        ),
    ]
    tried = []
    for python, env in candidates:
        check = [
            *AS_NOBODY,
            str(UNSHARE),
            "--user",
            "--map-root-user",
            python,
            "-c",
            "import rig.confine.network",
        ]
        probe = subprocess.run(check, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            return python, env
        tried.append(f"{python}: {probe.stderr.strip()[-200:]}")
    raise AssertionError(f"no interpreter user nobody can run in a user namespace: {tried}")


def test_an_ordinary_user_s_agent_runs_as_its_uid_powerless_over_its_network_namespace() -> None:
    # pytest's tmp_path lies below folders only root may enter.
    with tempfile.TemporaryDirectory(prefix="rig-fallback-uid-") as folder:
        cwd = Path(folder)
        cwd.chmod(0o777)
        python, env = _python_for_nobody(cwd)
        seen = json.loads(_run([*AS_NOBODY, python, "-c", AS_USER, AGENT], env, cwd).splitlines()[-1])
    assert seen["as_user"] == [NOBODY, NOBODY]
    assert seen["network"].startswith("a network namespace per agent (unshare --user --map-root-user --net)")
    assert f"the agent as uid {NOBODY} in a user namespace nested in it, powerless over it" in seen["network"]
    # Nobody's agent runs as nobody: no sentence about root.
    assert seen["sandbox"] == "disabled with --sandbox off"
    dropped, kept = seen["dropped"], seen["kept"]
    assert (dropped["uid"], dropped["gid"]) == (NOBODY, NOBODY)
    assert dropped["proxy"].startswith("HTTP/1.1 403 "), "the relay must still serve the dropped agent"
    assert dropped["lo_down"] == "Operation not permitted"
    assert dropped["left"] == "Permission denied"
    # Without the drop: root of the outer user namespace, which owns the network namespace.
    assert (kept["uid"], kept["gid"]) == (0, 0)
    assert kept["proxy"].startswith("HTTP/1.1 403 ")
    assert kept["lo_down"] == "done"
    assert kept["left"] == "Permission denied"


def test_root_s_agent_is_powerless_over_its_network_and_every_record_and_doctor_say_it_is_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert os.geteuid() == 0, "this test runs as root (as CI does): it is about root's fallback"
    monkeypatch.setenv("RIG_BWRAP", "/nonexistent/bwrap")
    plan, status = resolve_network("model-only", [], sandboxed=False, required=True)
    assert plan is not None and plan.unshare == (UNSHARE, "--net") and plan.as_user == (0, 0)
    assert "the agent as uid 0 in a user namespace nested in it, powerless over it" in (status.detail or "")
    seen = {}
    for name, chosen in (("dropped", plan), ("kept", dataclasses.replace(plan, as_user=None))):
        with Egress(chosen, None) as egress:
            argv = egress.wrap([sys.executable, "-I", "-S", "-c", AGENT, str(os.getpid())])
            seen[name] = json.loads(_run(argv, {"PATH": "/usr/bin:/bin", **egress.env()}, tmp_path))
    dropped, kept = seen["dropped"], seen["kept"]
    # Root to its files, through the proxy only, and neither able to change its namespace nor leave it.
    assert (dropped["uid"], dropped["proxy"][:13]) == (0, "HTTP/1.1 403 ")
    assert dropped["lo_down"] == "Operation not permitted" and dropped["left"] == "Permission denied"
    # Without the drop, root of the namespace's owner: it changes it and leaves it for this one.
    assert kept["lo_down"] == "done" and kept["left"] == "done"
    for mode in ("auto", "off"):
        _none, sandbox = resolve(mode, [], [])
        assert not sandbox.active and (sandbox.detail or "").endswith(f"; {AS_ROOT}")
        assert AS_ROOT in (sandbox.warning() or "")
    rows = {p.name: p for p in diagnose()}
    assert not rows["sandbox"].active and AS_ROOT in rows["sandbox"].detail
    assert rows["network"].active and "powerless over it" in rows["network"].detail

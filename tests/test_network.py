"""Network egress control (issue 17): real sockets, real bubblewrap, real `rig run`.

Two loopback servers stand for the model (allowed) and another host (refused). Agents try curl,
Python's urllib, a raw socket and DNS lookups; nothing reaches the refused server, and every attempt
that reached the egress proxy is in the run's log and its record's `network` block.
"""

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import harnesses
from rig.confine.agent import Confinement, run_agent_process
from rig.confine.network import LOG_NAME, RELAY, Egress, NetworkPlan, resolve_network
from rig.confine.sandbox import resolve
from rig.run.doctor import diagnose
from rig.schema import Experiment, parse_host_port
from rig.store.migrate import migrate

RIG = str(Path(sys.executable).with_name("rig"))
TASK = "t1_fix_pagination"


@dataclass
class Server:
    """A loopback HTTP server that counts the connections it accepted."""

    httpd: ThreadingHTTPServer
    connections: list[int] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


def _serve() -> Server:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    server = Server(httpd)
    accept = httpd.get_request

    def counted() -> tuple[socket.socket, object]:
        request = accept()
        server.connections.append(1)
        return request

    httpd.get_request = counted  # type: ignore[method-assign]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Server, Server]]:
    model, other = _serve(), _serve()
    yield model, other
    for server in (model, other):
        server.httpd.shutdown()
        server.httpd.server_close()


def attempts(model: int, other: int) -> list[tuple[str, int]]:
    """(shell command, the exit code it must have) of an agent probing the network."""
    py = "python3 -c"
    return [
        (f"curl -sSf -m 10 http://127.0.0.1:{model}/", 0),  # through the proxy
        (f"curl -sSf -m 10 --noproxy '*' http://127.0.0.1:{model}/", 0),  # at the model's own address
        (f"curl -sSf -m 10 http://127.0.0.1:{other}/", 22),  # the proxy answers 403
        (f"curl -sS -m 10 -x '' --noproxy '*' http://127.0.0.1:{other}/", 7),  # nothing listens there
        (f"{py} \"import urllib.request as u; u.urlopen('http://127.0.0.1:{other}/', timeout=10)\"", 1),
        (f"{py} \"import socket; socket.create_connection(('127.0.0.1', {other}), timeout=10)\"", 1),
        ("getent hosts example.com", 2),
        (f"{py} \"import socket; socket.getaddrinfo('example.com', 443)\"", 1),
        (f"curl -sS -m 10 https://example.com:{other}/", 56),  # CONNECT refused
    ]


def probe_script(model: int, other: int) -> str:
    """One shell line per attempt printing its exit code, so a run shows them all."""
    return "\n".join(f"{cmd} >/dev/null 2>&1; echo $?" for cmd, _ in attempts(model, other))


def test_policies_are_validated() -> None:
    base = {"name": "e", "harness": "scripted", "conditions": [{"name": "a"}]}
    assert Experiment.model_validate(base).network == "model-only"
    with pytest.raises(ValueError, match='set network = "allowlist"'):
        Experiment.model_validate({**base, "allow": ["pypi.org:443"]})
    with pytest.raises(ValueError, match="empty allow"):
        Experiment.model_validate({**base, "network": "allowlist"})
    with pytest.raises(ValueError, match="is not host:port"):
        Experiment.model_validate({**base, "network": "allowlist", "allow": ["pypi.org"]})
    assert parse_host_port("[::1]:8080") == ("::1", 8080)
    assert parse_host_port("PyPI.org:443") == ("pypi.org", 443)


def test_records_before_network_control_migrate_to_none() -> None:
    assert migrate({"record_schema": 4, "run_id": "r"})["network"] is None


def test_doctor_shows_network_control_active(monkeypatch) -> None:
    [row] = [p for p in diagnose() if p.name == "network"]
    assert row.active and row.detail.startswith("bubblewrap's network namespace; out only through")
    monkeypatch.setenv("RIG_BWRAP", "/nonexistent/bwrap")
    [row] = [p for p in diagnose() if p.name == "network"]
    assert row.active and row.detail.startswith("a network namespace per agent (unshare --net)")


def _probe(tmp_path: Path, plan: NetworkPlan, model: int, other: int, sandboxed: bool):
    # What the runner shows an agent again inside the sandbox's fresh /tmp: the interpreters and the
    # harnesses package and the relay the sandbox starts, wherever this checkout lives (CI: /tmp).
    runtime = [Path(sys.prefix), Path(sys.base_prefix), Path(harnesses.__file__).resolve().parent, RELAY]
    sandbox, _ = resolve("require" if sandboxed else "off", hidden=[], exposed=runtime)
    run = run_agent_process(
        ["sh", "-c", probe_script(model, other)],
        tmp_path,
        {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        tmp_path / "run",
        120,
        confinement=Confinement(sandbox=sandbox, network=plan),
        model_url=f"http://127.0.0.1:{model}/v1",
    )
    return run, [int(code) for code in (tmp_path / "run" / "stdout.log").read_text().split()]


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bwrap", "unshare"])
def test_model_only_lets_the_model_through_and_nothing_else(servers, tmp_path, sandboxed) -> None:
    model, other = servers
    plan, status = resolve_network("model-only", [], sandboxed=sandboxed, required=True)
    assert plan is not None and status.active
    before = len(other.connections), len(model.connections)
    run, codes = _probe(tmp_path, plan, model.port, other.port, sandboxed)
    assert codes == [code for _, code in attempts(model.port, other.port)], run.stderr_path.read_text()
    assert len(other.connections) == before[0], "a connection reached the refused server"
    assert len(model.connections) == before[1] + 2
    network = run.network
    assert network is not None
    assert network.backend == ("bwrap-netns" if sandboxed else "unshare-netns")
    assert network.allowed == [f"127.0.0.1:{model.port}"]
    [reached] = network.reached
    assert (reached.host, reached.port, reached.connections) == ("127.0.0.1", model.port, 2)
    assert reached.bytes_out > 0 and reached.bytes_in > 0
    refused = {(e.host, e.port): e.connections for e in network.refused}
    assert refused == {("127.0.0.1", other.port): 2, ("example.com", other.port): 1}
    log = [json.loads(line) for line in (tmp_path / "run" / LOG_NAME).read_text().splitlines()]
    assert sorted((e["via"], e["port"], e["allowed"]) for e in log) == sorted(
        [
            ("http", model.port, True),
            ("direct", model.port, True),
            ("http", other.port, False),
            ("http", other.port, False),
            ("connect", other.port, False),
        ]
    )


def test_the_relay_socket_itself_refuses_what_the_policy_does(servers, tmp_path) -> None:
    """An agent that finds the Unix socket and speaks to it directly gets the same refusals."""
    model, other = servers
    plan, _ = resolve_network("model-only", [], sandboxed=True, required=True)
    assert plan is not None
    before = len(other.connections)
    with Egress(plan, ("127.0.0.1", model.port)) as egress:
        answers = []
        for first in (
            f"T 127.0.0.1 {other.port}\n",
            f"P\nCONNECT 127.0.0.1:{other.port} HTTP/1.1\r\n\r\n",
            "hello\n",
        ):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(10)
                sock.connect(str(egress.socket_path))
                sock.sendall(first.encode())
                answers.append(sock.recv(1024))
    assert answers[0] == b"" and answers[1].startswith(b"HTTP/1.1 403 ") and answers[2] == b""
    assert len(other.connections) == before
    assert egress.outcome is not None and egress.outcome.refused[0].connections == 2
    assert [json.loads(line)["allowed"] for line in egress.lines] == [False, False, False]


def _rig(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "RIG_RESULTS_ROOT": str(tmp_path / "results"),
        "RIG_RUNS_ROOT": str(tmp_path / "runs"),
    }
    return subprocess.run([RIG, *args], capture_output=True, text=True, timeout=600, env=env)


def _experiment(tmp_path: Path, name: str, network: str, commands: list[str], allow: list[str]) -> Path:
    lines = [
        f'name = "{name}"',
        'harness = "scripted"',
        f'tasks = ["{TASK}"]',
        f'network = "{network}"',
        *([f"allow = {json.dumps(allow)}"] if allow else []),
        "[timeouts]",
        "agent_s = 120",
        "stall_s = 60",
        "[[conditions]]",
        'name = "probe"',
        f'harness_options = {{ policy = "script", commands = {json.dumps(commands)} }}',
    ]
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_rig_run_records_the_network_and_the_report_counts_refusals(servers, tmp_path) -> None:
    model, other = servers
    before = len(other.connections)
    commands = [cmd for cmd, _ in attempts(model.port, other.port)]
    exp = _experiment(tmp_path, "net-allow", "allowlist", commands, [f"127.0.0.1:{model.port}"])
    proc = _rig(tmp_path, "run", str(exp))
    assert proc.returncode == 0, proc.stderr
    assert "network: allowlist, bubblewrap's network namespace" in proc.stderr
    results = tmp_path / "results" / "net-allow"
    [record] = [json.loads(line) for line in (results / "runs.jsonl").read_text().splitlines()]
    folder = results / record["artifacts"]
    codes = []
    for line in (folder / "session.jsonl").read_text().splitlines():
        message = json.loads(line).get("message", {})
        if message.get("role") == "toolResult" and message.get("toolName") == "bash":
            codes.append(message["details"]["exitCode"])
    assert codes == [code for _, code in attempts(model.port, other.port)]
    assert len(other.connections) == before
    network = record["network"]
    assert network["policy"] == "allowlist" and network["active"] and network["backend"] == "bwrap-netns"
    assert sum(e["connections"] for e in network["refused"]) == 3
    assert len((folder / LOG_NAME).read_text().splitlines()) == 5
    assert not [w for w in record["warnings"] if w.startswith("network:")]
    report = _rig(tmp_path, "report", str(exp))
    assert report.returncode == 0, report.stderr
    behaviour = (results / "report.md").read_text().split("4. Behaviour")[1].splitlines()
    header = next(line for line in behaviour if line.startswith("| condition |"))
    row = next(line for line in behaviour if line.startswith("| `probe` |"))
    assert header.split("|")[-2].strip() == "tried to reach another host"
    assert row.split("|")[-2].strip() == "100% (1/1)"


@pytest.mark.slow
def test_open_reaches_anything_and_warns_in_the_record(servers, tmp_path) -> None:
    _model, other = servers
    before = len(other.connections)
    exp = _experiment(tmp_path, "net-open", "open", [f"curl -sSf -m 10 http://127.0.0.1:{other.port}/"], [])
    proc = _rig(tmp_path, "run", str(exp))
    assert proc.returncode == 0, proc.stderr
    assert 'network: the agent could reach any host this machine can (network = "open")' in proc.stderr
    [record] = [
        json.loads(line)
        for line in (tmp_path / "results" / "net-open" / "runs.jsonl").read_text().splitlines()
    ]
    assert record["network"]["policy"] == "open" and not record["network"]["active"]
    assert 'network: the agent could reach any host this machine can (network = "open")' in record["warnings"]
    assert len(other.connections) == before + 1

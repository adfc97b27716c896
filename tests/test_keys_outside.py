"""The provider's key never enters the agent's sandbox: the agent holds a placeholder, and the run's
key gateway (rig.confine.keygate) puts the key in on the host, in whichever scheme the CLI uses.

Proved three ways, all real: the gateway against a local HTTPS endpoint with its own certificate
authority (each scheme, streaming, certificate verification); the mock model checking a key (401
without it, the ledger saying ok, missing or wrong); and every real CLI, run by `rig run` against
the mock with `api_key_env`, dumping its environment, every process's environment and command line
and every file of its home into the workspace, where the key is found nowhere, while every request
the mock received carried it.
"""

import json
import os
import re
import secrets
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harnesses.mock_model import MockModelServer
from harnesses.mock_model.policy import do_nothing
from harnesses.registry import calibrated_names, mock_protocols
from rig.confine.keygate import PLACEHOLDER, KeyGate, KeyGateError

RIG = str(Path(sys.executable).with_name("rig"))
KEY = "sk-test-" + "7" * 24


def no_proxy_open(request: urllib.request.Request, timeout: float = 20):
    return urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=timeout)


# --- a local HTTPS provider with its own certificate authority ----------------------------------


def openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a certificate for 127.0.0.1 it signed: ca.pem, server.pem, server.key."""
    folder = tmp_path_factory.mktemp("ca")
    new_key = ["-newkey", "rsa:2048", "-nodes"]
    openssl(
        "req",
        "-x509",
        *new_key,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=CA",
        cwd=folder,
    )
    openssl(
        "req", *new_key, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=folder
    )
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    signed = ["-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-extfile", "san.ext", "-days", "2"]
    openssl("x509", "-req", "-in", "server.csr", *signed, "-out", "server.pem", cwd=folder)
    return folder


class Provider:
    """An HTTPS server on 127.0.0.1 that keeps what each request carried and streams two events,
    the second only once the test has seen the first (`release`)."""

    def __init__(self, authority: Path) -> None:
        self.seen: list[dict] = []
        self.release = threading.Event()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                provider.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if self.path.startswith("/v1/stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    self.wfile.write(b"data: first\n\n")
                    self.wfile.flush()
                    provider.release.wait(20)
                    self.wfile.write(b"data: second\n\n")
                    return
                payload = b'{"ok": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(authority / "server.pem", authority / "server.key")
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "Provider":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def provider(authority: Path) -> Iterator[Provider]:
    with Provider(authority) as running:
        yield running


SCHEMES = {
    "x-api-key": ({"x-api-key": PLACEHOLDER}, ""),
    "bearer": ({"Authorization": f"Bearer {PLACEHOLDER}"}, ""),
    "x-goog-api-key": ({"x-goog-api-key": PLACEHOLDER}, ""),
    "query": ({}, f"?alt=sse&key={PLACEHOLDER}"),
}


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_the_gateway_puts_the_key_where_the_cli_put_the_placeholder(
    provider: Provider, authority: Path, scheme: str
) -> None:
    headers, query = SCHEMES[scheme]
    with KeyGate(provider.url, KEY, cafile=str(authority / "ca.pem")) as gate:
        assert gate.url.startswith("http://127.0.0.1:") and gate.url.endswith("/v1")
        request = urllib.request.Request(
            f"{gate.url}/messages{query}", data=b'{"model": "m"}', headers=headers, method="POST"
        )
        with no_proxy_open(request) as response:
            assert response.status == 200 and response.read() == b'{"ok": true}'
        log = list(gate.log)
    (seen,) = provider.seen
    sent = {k.lower(): v for k, v in seen["headers"].items()}
    if scheme == "query":
        assert seen["path"] == f"/v1/messages?alt=sse&key={KEY}"
    else:
        ((name, value),) = headers.items()
        assert sent[name.lower()] == value.replace(PLACEHOLDER, KEY)
        assert seen["path"] == "/v1/messages"
    assert sent["host"] == provider.url.split("/")[2]
    assert seen["body"] == b'{"model": "m"}'
    assert PLACEHOLDER not in json.dumps(seen["headers"]) + seen["path"]
    # Its log names the request, never a header or the query.
    assert log == ["POST /v1/messages -> 200"]


def test_the_gateway_streams_each_event_as_it_comes(provider: Provider, authority: Path) -> None:
    with KeyGate(provider.url, KEY, cafile=str(authority / "ca.pem")) as gate:
        request = urllib.request.Request(f"{gate.url}/stream", data=b"{}", method="POST")
        with no_proxy_open(request) as response:
            # The provider sends its second event only once the first got through the gateway.
            assert response.readline() == b"data: first\n"
            assert response.readline() == b"\n"
            provider.release.set()
            assert response.read() == b"data: second\n\n"


def test_the_gateway_verifies_the_providers_certificate(provider: Provider) -> None:
    # Without the test's authority (the system's trust store only), the handshake fails: the key
    # is never sent, and the CLI gets a 502 that names no key.
    with KeyGate(provider.url, KEY) as gate:
        request = urllib.request.Request(f"{gate.url}/messages", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as failed:
            no_proxy_open(request)
        assert failed.value.code == 502
        assert KEY not in failed.value.read().decode()
    assert provider.seen == []


@pytest.mark.parametrize(
    ("url", "key", "message"),
    [("ftp://host/x", KEY, "no http(s) URL"), ("https://host/v1", "", "key is empty")],
)
def test_a_gateway_it_cannot_set_up_is_one_line(url: str, key: str, message: str) -> None:
    with pytest.raises(KeyGateError, match=re.escape(message)):
        KeyGate(url, key)


# --- the mock checks a key as a provider does ---------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "status", "state"),
    [
        ({}, 401, "missing"),
        ({"Authorization": f"Bearer {PLACEHOLDER}"}, 401, "wrong"),
        ({"Authorization": f"Bearer {KEY}"}, 200, "ok"),
    ],
    ids=["missing", "wrong", "ok"],
)
def test_the_mock_answers_401_without_its_key_and_the_ledger_says_so(
    headers: dict[str, str], status: int, state: str
) -> None:
    with MockModelServer(do_nothing(), mock_protocols(), api_key=KEY) as server:
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}], "tools": []}
        request = urllib.request.Request(
            f"{server.base_url}/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **headers},
            method="POST",
        )
        try:
            with no_proxy_open(request) as response:
                got = response.status
                response.read()
        except urllib.error.HTTPError as exc:
            got = exc.code
        assert got == status
        (entry,) = server.ledger
    assert entry.key == state and entry.status == status
    assert KEY not in json.dumps(entry.__dict__, default=str)


# --- every real CLI, end to end -----------------------------------------------------------------

# Run by the agent through its shell tool: its own environment, every process's environment and
# command line it can see, and every file of its home, into the workspace (its diff and artifacts).
DUMP = (
    "env > key-dump-env.txt; "
    "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; tr '\\0' '\\n' < $p/environ; done "
    "> key-dump-proc.txt 2>/dev/null; "
    'find "$HOME" -type f -exec cat {} + > key-dump-home.txt 2>/dev/null; true'
)


def experiment(folder: Path, harness: str) -> Path:
    path = folder / f"keys_{harness.replace('-', '_')}.toml"
    path.write_text(
        f'harness = "{harness}"\n'
        'tasks = ["t1_fix_pagination"]\n'
        'provider = { kind = "mock", api_key_env = "RIG_SECRET_UNDER_TEST" }\n'
        "[timeouts]\nagent_s = 180\nstall_s = 60\n"
        "[[conditions]]\n"
        'name = "dump"\n'
        f'harness_options = {{ mock_policy = "commands", commands = [{json.dumps(DUMP)}] }}\n'
    )
    return path


@pytest.mark.slow
def test_no_real_cli_ever_holds_the_key(tmp_path: Path) -> None:
    secret = "rig-secret-" + secrets.token_hex(16)
    env = {
        **os.environ,
        "RIG_RESULTS_ROOT": str(tmp_path / "results"),
        "RIG_RUNS_ROOT": str(tmp_path / "runs"),
        "RIG_SECRET_UNDER_TEST": secret,
    }
    harnesses = calibrated_names()
    runners = {
        h: subprocess.Popen(
            [RIG, "run", str(experiment(tmp_path, h)), "--keep-workspaces"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for h in harnesses
    }
    try:
        outputs = {h: runner.communicate(timeout=900) for h, runner in runners.items()}
    finally:
        for runner in runners.values():
            runner.kill()
            runner.wait()
    for harness in harnesses:
        assert runners[harness].returncode == 0, (harness, outputs[harness][1][-3000:])
        name = f"keys_{harness.replace('-', '_')}"
        (attempt,) = (tmp_path / "results" / name / "runs").glob("*/attempt-*")
        record = json.loads((attempt / "record.json").read_text())
        assert not record["infra"]["is_infra"], (harness, record["infra"])
        ledger = json.loads((attempt / "mock-ledger.json").read_text())["ledger"]
        # Every request reached the mock with the key: the gateway put it in.
        assert ledger and all(e["key"] == "ok" for e in ledger), (harness, ledger)
        assert "shell" in [e["step_kind"] for e in ledger if e["outcome"] == "served"], harness
        # The agent dumped what it holds: the placeholder, never the key.
        (workspace,) = (tmp_path / "runs" / name).glob("t1_*/work")
        dumps = {p.name: p.read_bytes() for p in workspace.glob("key-dump-*.txt")}
        assert set(dumps) == {"key-dump-env.txt", "key-dump-proc.txt", "key-dump-home.txt"}, harness
        assert PLACEHOLDER.encode() in dumps["key-dump-env.txt"], harness
        assert PLACEHOLDER.encode() in dumps["key-dump-proc.txt"], harness
    # Nowhere: no result, artifact, diff, session, workspace or dump of any run holds it.
    for root in (tmp_path / "results", tmp_path / "runs"):
        holding = [
            p
            for p in root.rglob("*")
            if p.is_file() and not p.is_symlink() and secret.encode() in p.read_bytes()
        ]
        assert not holding, holding


def test_a_mock_that_names_a_key_variable_is_refused_while_it_is_unset(tmp_path: Path) -> None:
    path = tmp_path / "unset.toml"
    path.write_text(
        'harness = "pi"\ntasks = ["t1_fix_pagination"]\n'
        'provider = { kind = "mock", api_key_env = "RIG_KEY_NOBODY_SET" }\n'
        '[[conditions]]\nname = "a"\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "RIG_KEY_NOBODY_SET"}
    env["RIG_RESULTS_ROOT"] = str(tmp_path / "results")
    proc = subprocess.run([RIG, "run", str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: $RIG_KEY_NOBODY_SET is not set (provider 'mock'); export it in this shell, then rerun"
    ]
    assert not (tmp_path / "results").exists()


def test_a_real_provider_without_an_endpoint_the_rig_knows_is_refused_before_running(tmp_path: Path) -> None:
    path = tmp_path / "unknown.toml"
    path.write_text(
        'harness = "pi"\nmodel = "m"\ntasks = ["t1_fix_pagination"]\nnetwork = "open"\n'
        'provider = { kind = "real", name = "mystery", api_key_env = "RIG_MYSTERY_KEY" }\n'
        '[[conditions]]\nname = "a"\n'
    )
    env = {**os.environ, "RIG_MYSTERY_KEY": "k", "RIG_RESULTS_ROOT": str(tmp_path / "results")}
    proc = subprocess.run([RIG, "run", str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: harness pi: pi knows no endpoint for provider 'mystery'; set provider.base_url (the rig "
        "forwards the CLI's requests there, holding the key outside the agent's sandbox)"
    ]


def test_rig_doctor_says_keys_are_kept_outside() -> None:
    proc = subprocess.run([RIG, "doctor", "--json"], capture_output=True, text=True, timeout=300)
    (row,) = [p for p in json.loads(proc.stdout) if p["name"] == "provider keys"]
    assert row["active"] and row["detail"].startswith("kept outside the agent's sandbox")

"""The agent's network: a namespace of its own whose only way out is the rig's egress proxy.

Under the policies `model-only` and `allowlist` (docs/network.md) the agent runs in a network
namespace of its own (bubblewrap's `--unshare-net`, or `unshare --net` without bubblewrap), where
only the loopback interface exists. Inside it, `rig/confine/netrelay.py` listens on the proxy port
(`PROXY_PORT`, which HTTPS_PROXY, HTTP_PROXY and ALL_PROXY name) and on each model endpoint's own
loopback address, and passes every connection over a Unix socket to the `Egress` proxy running
here, on the host side, which lets through only the policy's host:port, logs every attempt (host,
port, allowed or refused, bytes) and relays the bytes. Anything else the agent tries (a raw socket
to another port, a DNS lookup) finds nothing listening in its namespace and fails there, unlogged.

Without bubblewrap, a non-root user's namespace is made in a user namespace where the relay is
root (it must be, to bring `lo` up); root's is a plain `unshare --net`. Either way the relay then
runs the agent as the invoking uid and gid in a user namespace nested inside, where it has no
capability over the network namespace: root's agent is still uid 0 to the files it touches, but can
neither reconfigure its namespace nor leave it. Where nesting fails, the record's detail says what
the agent could do.

`open` runs the agent on the machine's network, and every record says so in a warning.
"""

import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from rig.confine import netrelay
from rig.confine.proc import UNSHARE, try_command
from rig.schema import NetworkEndpoint, NetworkOutcome, Provider, parse_host_port

# Run as a file (python -I -S), found by its module: inside the namespace it imports nothing.
RELAY = Path(netrelay.__file__).resolve()
# The proxy's port inside the agent's namespace, unless a model endpoint takes it.
PROXY_PORT = 3128
SOCKET_NAME = "egress.sock"
LOG_NAME = "network.jsonl"
# An agent making connections in a loop must not fill the disk: later attempts are only counted.
LOG_ENTRIES = 10_000
HEAD_BYTES = 16 * 1024
CONNECT_TIMEOUT_S = 10.0
# How long stopping waits for connections still relaying bytes after the agent is gone.
STOP_S = 5.0
_CHUNK = 64 * 1024
_UNSHARE_FLAGS: tuple[tuple[str, ...], ...] = ((), ("--user", "--map-root-user"))


class NetworkError(Exception):
    """A network policy that cannot be enforced where it was required; the message says what to do."""


@dataclass(frozen=True)
class NetworkPlan:
    """How a confining policy is enforced for every agent of an experiment.

    `allow` holds the policy's own host:port (allowlist); each run adds its model's endpoint.
    `unshare` is the prefix of a network namespace without bubblewrap (None under bubblewrap);
    `as_user` the uid and gid the relay runs the agent as, in a user namespace nested in that
    prefix's (None: the agent is the namespace's root).
    """

    policy: str
    allow: tuple[tuple[str, int], ...]
    backend: str
    detail: str
    unshare: tuple[str, ...] | None = None
    as_user: tuple[int, int] | None = None


def resolve_network(
    policy: str, allow: list[str], sandboxed: bool, required: bool
) -> tuple[NetworkPlan | None, NetworkOutcome]:
    """The plan for `policy` on this machine (None: the agent uses the machine's network), and the
    status every record starts from.

    Under bubblewrap (`sandboxed`) its network namespace; else `unshare --net` where it works. Where
    neither can confine, raises NetworkError when `required` (`--sandbox require`), else the
    status is inactive and every record carries its warning.
    """
    endpoints = tuple(parse_host_port(entry) for entry in allow)
    allowed = [f"{host}:{port}" for host, port in endpoints]
    if policy == "open":
        return None, NetworkOutcome(policy=policy, active=False, detail='network = "open"', allowed=["*"])
    if sandboxed:
        detail = "bubblewrap's network namespace; out only through the rig's egress proxy"
        plan = NetworkPlan(policy, endpoints, "bwrap-netns", detail)
    else:
        prefix, as_user, how = _netns_probe()
        if prefix is None:
            problem = f"no network namespace here ({how})"
            if required:
                raise NetworkError(
                    f"network {policy!r}: {problem}; install bubblewrap, or run with --sandbox auto to "
                    'accept the risk, or set network = "open"'
                )
            return None, NetworkOutcome(policy=policy, active=False, detail=problem, allowed=allowed)
        detail = f"{how}; out only through the rig's egress proxy"
        plan = NetworkPlan(policy, endpoints, "unshare-netns", detail, prefix, as_user)
    return plan, NetworkOutcome(
        policy=policy, active=True, backend=plan.backend, detail=plan.detail, allowed=allowed
    )


def _try_netns(prefix: tuple[str, ...], as_user: tuple[int, int] | None = None) -> str | None:
    """None if `prefix` makes a network namespace whose loopback the relay can bring up (and, given
    `as_user`, where the relay can run a command as that uid and gid), else why not."""
    relay = [sys.executable, "-I", "-S", str(RELAY), "--socket", "-", "--proxy-port", "0", "--lo-up"]
    if as_user is not None:
        relay += ["--as-user", _ids(as_user), "--", "true"]
    return try_command([*prefix, "--", *relay])[1]


@cache
def _netns_probe() -> tuple[tuple[str, ...] | None, tuple[int, int] | None, str]:
    """(the unshare prefix of a network namespace, the uid and gid the agent runs as in a user
    namespace nested in it or None, what it is), or (None, None, why there is none)."""
    if UNSHARE is None:
        return None, None, "unshare not found (install util-linux)"
    problem = None
    for flags in _UNSHARE_FLAGS:
        prefix = (UNSHARE, *flags, "--net")
        problem = _try_netns(prefix)
        if problem is not None:
            continue
        how = f"a network namespace per agent ({' '.join(['unshare', *prefix[1:]])})"
        # The invoking uid, root's too: in a user namespace nested in the one owning the network
        # namespace, even uid 0 has no capability over it (it can neither reconfigure nor leave it).
        ids = (os.getuid(), os.getgid())
        nested = _try_netns(prefix, ids)
        if nested is None:
            return (
                prefix,
                ids,
                f"{how}, the agent as uid {ids[0]} in a user namespace nested in it, powerless over it",
            )
        return (
            prefix,
            None,
            f"{how}, the agent {'root' if ids[0] == 0 else 'root of its user namespace'} ({nested}): "
            "it could reconfigure the namespace" + (" or leave it" if "--user" not in flags else ""),
        )
    return None, None, f"unshare cannot create a network namespace: {problem}"


def _ids(ids: tuple[int, int]) -> str:
    """uid and gid as the relay's --as-user takes them."""
    return f"{ids[0]}:{ids[1]}"


# Where a real provider is reached when the experiment names no base_url (the harnesses' defaults).
PROVIDER_URLS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com",
    "google": "https://generativelanguage.googleapis.com",
    "gemini": "https://generativelanguage.googleapis.com",
    "openrouter": "https://openrouter.ai",
}


def model_url(provider: Provider) -> str | None:
    """The URL a real provider's model is reached at: its base_url, else the well-known one of its
    name; None for the mock (started per run) or a provider of unknown name without a base_url."""
    if provider.kind == "mock":
        return None
    return provider.base_url or PROVIDER_URLS.get((provider.name or "").lower())


def unreachable_model(policy: str, provider: Provider) -> str | None:
    """Why `policy` would leave the agent no way to its real model (no base_url and a provider name
    without a known endpoint), with the fix; None when it can reach it."""
    if policy == "open" or provider.kind == "mock" or model_url(provider):
        return None
    return (
        f"network {policy!r} lets the agent reach only its model, and provider {provider.name!r} has no "
        f'known endpoint ({", ".join(sorted(PROVIDER_URLS))} do); set provider.base_url, or network = "open"'
    )


def endpoint_of(url: str | None) -> tuple[str, int] | None:
    """(host, port) a base URL connects to (its scheme's default port if none), None without one."""
    if not url:
        return None
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    return parts.hostname.lower(), parts.port or (443 if parts.scheme == "https" else 80)


def proxy_env(port: int) -> dict[str, str]:
    """The variables that send proxy-aware tools (curl, pip, urllib, most SDKs) to the relay's proxy."""
    url = f"http://127.0.0.1:{port}"
    names = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
    # No NO_PROXY: a loopback request goes through the proxy too, so it is logged like any other.
    # yarn 2+ reads only its own variables (yarn 1 reads them too).
    return {
        **{n: url for n in names},
        **{n.lower(): url for n in names},
        "YARN_HTTPS_PROXY": url,
        "YARN_HTTP_PROXY": url,
        "NO_PROXY": "",
        "no_proxy": "",
    }


@dataclass
class _Totals:
    allowed: Counter[tuple[str, int]] = field(default_factory=Counter)
    refused: Counter[tuple[str, int]] = field(default_factory=Counter)
    failed: Counter[tuple[str, int]] = field(default_factory=Counter)
    bytes_out: Counter[tuple[str, int]] = field(default_factory=Counter)
    bytes_in: Counter[tuple[str, int]] = field(default_factory=Counter)


class Egress:
    """The host side of one agent's network: a Unix socket the relay in its namespace connects to,
    and a thread per connection that decides, logs and relays.

    `endpoints` are the host:port it lets through (the policy's and the run's model endpoint). The
    relay listens transparently on those with a loopback host; the rest are reached through the
    proxy. Use as a context manager around the agent; `outcome` then holds the summary and `lines`
    the log.
    """

    def __init__(self, plan: NetworkPlan, model: tuple[str, int] | None) -> None:
        self.plan = plan
        self.allowed = {*plan.allow, *([model] if model else [])}
        self.transparent = sorted(e for e in self.allowed if _loopback(e[0]))
        used = {port for _host, port in self.transparent}
        self.proxy_port = next(p for p in range(PROXY_PORT, PROXY_PORT + len(used) + 1) if p not in used)
        self.dir = Path(tempfile.mkdtemp(prefix="rig-egress-"))
        self.socket_path = self.dir / SOCKET_NAME
        self.lines: list[str] = []
        self.logged = 0
        self._totals = _Totals()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._open: set[socket.socket] = set()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.socket_path))
        # The agent connects under its own uid (unshare's mapped root is nobody out here).
        os.chmod(self.dir, 0o755)
        os.chmod(self.socket_path, 0o777)
        self._listener.listen(64)
        self._acceptor = threading.Thread(target=self._accept, name="rig-egress", daemon=True)
        self.outcome: NetworkOutcome | None = None

    def __enter__(self) -> "Egress":
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        """The proxy variables of the agent's environment."""
        return proxy_env(self.proxy_port)

    def wrap(self, command: list[str]) -> list[str]:
        """`command` started by the relay, inside the namespace (the caller puts it there)."""
        relay = [sys.executable, "-I", "-S", str(RELAY), "--socket", str(self.socket_path)]
        relay += ["--proxy-port", str(self.proxy_port)]
        for host, port in self.transparent:
            relay += ["--endpoint", f"{host}:{port}"]
        if self.plan.unshare is not None:
            relay.append("--lo-up")
            if self.plan.as_user is not None:
                relay += ["--as-user", _ids(self.plan.as_user)]
            return [*self.plan.unshare, "--", *relay, "--", *command]
        return [*relay, "--", *command]

    def stop(self) -> NetworkOutcome:
        """Stop accepting, give open connections STOP_S to end, then cut them; the run's summary."""
        if self.outcome is not None:
            return self.outcome
        try:
            # shutdown wakes the acceptor blocked in accept(); close alone would not.
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self._acceptor.join(timeout=STOP_S)
        deadline = time.monotonic() + STOP_S
        for thread in list(self._threads):
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            for sock in list(self._open):
                _close(sock)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.outcome = self._summary()
        return self.outcome

    def write_log(self, folder: Path) -> None:
        """Write the log into the attempt `folder` (after the agent is gone: it could write there)."""
        path = folder / LOG_NAME
        if path.is_symlink() or path.exists():
            path.unlink()
        path.write_text("".join(f"{line}\n" for line in self.lines))

    def _summary(self) -> NetworkOutcome:
        t = self._totals

        def endpoints(counts: Counter[tuple[str, int]], with_bytes: bool) -> list[NetworkEndpoint]:
            return [
                NetworkEndpoint(
                    host=host,
                    port=port,
                    connections=n,
                    bytes_out=t.bytes_out[(host, port)] if with_bytes else 0,
                    bytes_in=t.bytes_in[(host, port)] if with_bytes else 0,
                )
                for (host, port), n in sorted(counts.items())
            ]

        return NetworkOutcome(
            policy=self.plan.policy,
            active=True,
            backend=self.plan.backend,
            detail=self.plan.detail,
            allowed=sorted(f"{h}:{p}" for h, p in self.allowed),
            reached=endpoints(t.allowed, True),
            refused=endpoints(t.refused, False),
            failed=endpoints(t.failed, False),
            log=LOG_NAME,
        )

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), name="rig-egress-conn", daemon=True)
            with self._lock:
                self._open.add(conn)
                self._threads.append(thread)
            thread.start()

    def _log(self, entry: dict) -> None:
        with self._lock:
            self.logged += 1
            if len(self.lines) < LOG_ENTRIES:
                self.lines.append(json.dumps({"t": round(time.time(), 3), **entry}, sort_keys=True))

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._handle(conn)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(conn)
            _close(conn)

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(CONNECT_TIMEOUT_S)
        head = _read_until(conn, b"\n", HEAD_BYTES)
        line, _, rest = head.partition(b"\n")
        words = line.decode("latin-1").split()
        if len(words) == 3 and words[0] == "T" and words[2].isdigit():
            self._relay(conn, "direct", (words[1].lower(), int(words[2])), rest, None)
            return
        if words != ["P"]:
            self._log({"via": "socket", "allowed": False, "reason": "not a relay connection"})
            return
        if b"\r\n\r\n" not in rest:
            rest += _read_until(conn, b"\r\n\r\n", HEAD_BYTES - len(rest))
        request = rest.split(b"\r\n", 1)[0].decode("latin-1").split()
        target = _proxy_target(request)
        if target is None:
            self._log(
                {
                    "via": "proxy",
                    "allowed": False,
                    "reason": f"not a proxy request: {' '.join(request)[:200]}",
                }
            )
            conn.sendall(_response(400, "rig egress proxy: not a proxy request"))
            return
        if request[0].upper() == "CONNECT":
            # The client's first bytes after CONNECT's head belong to the tunnel.
            tunnel = rest.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in rest else b""
            self._relay(conn, "connect", target, tunnel, _response(200, "Connection established", body=False))
        else:
            self._relay(conn, "http", target, rest, None)

    def _relay(
        self, conn: socket.socket, via: str, target: tuple[str, int], first: bytes, ok: bytes | None
    ) -> None:
        host, port = target
        entry = {"via": via, "host": host, "port": port}
        if target not in self.allowed:
            with self._lock:
                self._totals.refused[target] += 1
            self._log({**entry, "allowed": False, "reason": f"network policy {self.plan.policy!r}"})
            if via != "direct":
                conn.sendall(
                    _response(403, f"rig: network policy {self.plan.policy!r} refuses {host}:{port}")
                )
            return
        try:
            upstream = socket.create_connection(target, timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            with self._lock:
                self._totals.failed[target] += 1
            self._log({**entry, "allowed": True, "error": str(exc)})
            if via != "direct":
                conn.sendall(_response(502, f"rig: {host}:{port} unreachable ({exc})"))
            return
        with self._lock:
            self._totals.allowed[target] += 1
            self._open.add(upstream)
        if ok is not None:
            conn.sendall(ok)
        conn.settimeout(None)
        upstream.settimeout(None)
        out = [0]
        back = threading.Thread(target=_copy, args=(upstream, conn, out), daemon=True)
        back.start()
        sent = [0]
        if first:
            upstream.sendall(first)
            sent[0] += len(first)
        _copy(conn, upstream, sent)
        back.join()
        with self._lock:
            self._open.discard(upstream)
            self._totals.bytes_out[target] += sent[0]
            self._totals.bytes_in[target] += out[0]
        _close(upstream)
        self._log({**entry, "allowed": True, "bytes_out": sent[0], "bytes_in": out[0]})


def _loopback(host: str) -> bool:
    """Whether the relay can listen at `host` inside the namespace (IPv4 loopback; the namespace's
    lo answers all of 127.0.0.0/8)."""
    return host == "localhost" or host.startswith("127.")


def _proxy_target(request: list[str]) -> tuple[str, int] | None:
    """(host, port) of a proxy request line: `CONNECT host:port` or an absolute-form URL."""
    if len(request) != 3:
        return None
    method, target, _version = request
    if method.upper() == "CONNECT":
        try:
            return parse_host_port(target)
        except ValueError:
            return None
    return endpoint_of(target) if target.startswith(("http://", "https://")) else None


def _response(status: int, reason: str, body: bool = True) -> bytes:
    text = f"{reason}\n".encode() if body else b""
    phrase = {200: "Connection established", 400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    head = f"HTTP/1.1 {status} {phrase}\r\n"
    if body:
        head += f"Content-Type: text/plain\r\nContent-Length: {len(text)}\r\nConnection: close\r\n"
    return (head + "\r\n").encode() + text


def _read_until(conn: socket.socket, marker: bytes, limit: int) -> bytes:
    data = b""
    while marker not in data and len(data) < limit:
        chunk = conn.recv(min(_CHUNK, limit - len(data)))
        if not chunk:
            break
        data += chunk
    return data


def _copy(source: socket.socket, sink: socket.socket, count: list[int]) -> None:
    """Bytes from `source` to `sink` until `source` ends; then half-close `sink` (counted in `count`)."""
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
            count[0] += len(data)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()

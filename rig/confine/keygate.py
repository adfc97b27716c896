"""The provider's key stays outside the agent's sandbox: a per-run gateway on the host's 127.0.0.1.

The agent's CLI gets a plain-HTTP base URL on this gateway and a placeholder where its key goes
(`PLACEHOLDER`, in the variable, file or flag the CLI reads its key from). The gateway forwards each
request to the provider's real endpoint, with the placeholder replaced by the key wherever the
CLI's scheme puts it: `x-api-key`, `Authorization: Bearer`, `x-goog-api-key` or the `?key=` query
parameter. Upstream it speaks TLS with the certificate verified (the system's trust store, or the
`cafile` given), and passes each response back as it arrives, so server-sent events stream
unbuffered. It forwards only to that one endpoint, intercepts nothing else (the agent's other
traffic never reaches it), and logs nothing of a request but its path and status.

Whatever the agent reads (its environment, its home, its config files, its command line) holds
the placeholder; anything it writes into the workspace, the diff or the artifacts, or sends to the
endpoint, carries no key. The gateway is the model endpoint the confined network lets the agent
reach (rig.confine.network), in place of the provider's host.
"""

import http.client
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

# What the agent holds instead of the key: recognisable in a dump, worth nothing to anyone.
PLACEHOLDER = "rig-placeholder-key-kept-outside-the-sandbox"
# A stream may pause for as long as a model thinks; the rig's stall watchdog bounds the run itself.
UPSTREAM_TIMEOUT_S = 600
_CHUNK = 64 * 1024
_MAX_BODY = 64 * 2**20
# Hop-by-hop headers (RFC 9110 7.6.1) belong to one connection, never forwarded; Host and the
# length are set anew for the upstream request, and the whole body is read before it is sent
# (so no Expect: 100-continue).
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "expect",
    }
)


class KeyGateError(Exception):
    """A gateway that cannot be set up (an endpoint URL it cannot forward to); says the fix."""


class KeyGate:
    """One run's gateway to `upstream` (the provider's base URL, https or http), holding `key`.

    Use as a context manager; `url` (the gateway's base URL, with the upstream's path) is valid
    inside. `requests` counts what it forwarded, `log` holds one line per request (method, path,
    status; never a header or the query).
    """

    def __init__(self, upstream: str, key: str, cafile: str | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise KeyGateError(
                f"provider endpoint {upstream!r} is no http(s) URL; set provider.base_url to one"
            )
        if not key:
            raise KeyGateError("the provider's key is empty; set its api_key_env variable to the key")
        self.upstream = parts
        self.key = key
        self.context = ssl.create_default_context(cafile=cafile) if parts.scheme == "https" else None
        self.log: list[str] = []
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="rig-keygate", daemon=True)

    @property
    def url(self) -> str:
        """The base URL the agent's CLI is given: this gateway, with the upstream's path."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{self.upstream.path.rstrip('/')}"

    def __enter__(self) -> "KeyGate":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving and cut every upstream connection still open (a stream held by a stalled
        agent ends with the run)."""
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            for connection in list(self._open):
                connection.close()
        self._thread.join(timeout=5)

    def with_key(self, text: str) -> str:
        """`text` (a header value or a query) with the placeholder replaced by the key."""
        return text.replace(PLACEHOLDER, self.key)

    def connect(self) -> http.client.HTTPConnection:
        """A new connection to the upstream, tracked until `release`."""
        port = self.upstream.port
        if self.context is not None:
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.upstream.hostname, port, timeout=UPSTREAM_TIMEOUT_S, context=self.context
            )
        else:
            connection = http.client.HTTPConnection(self.upstream.hostname, port, timeout=UPSTREAM_TIMEOUT_S)
        with self._lock:
            self._open.add(connection)
        return connection

    def release(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            self._open.discard(connection)
        connection.close()

    def note(self, line: str) -> None:
        with self._lock:
            self.log.append(line)


def _handler_for(gate: KeyGate) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # One request per connection: every CLI's HTTP client handles a closed connection, and a
        # response of unknown length then simply ends when the connection does.
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
            pass  # the default prints the request line, query (a `?key=`) included

        def _forward(self) -> None:
            # Through the egress proxy a request may come in absolute form (RFC 9112 3.2.2).
            target = urlsplit(self.path)
            path = target.path or "/"
            query = gate.with_key(target.query)
            try:
                body = self._body()
            except ValueError as exc:
                self._fail(400, str(exc))
                return
            headers = {
                name: gate.with_key(value)
                for name, value in self.headers.items()
                if name.lower() not in _HOP_BY_HOP
            }
            headers["Host"] = self._upstream_host()
            if body or self.command in ("POST", "PUT", "PATCH"):
                headers["Content-Length"] = str(len(body))
            connection = gate.connect()
            try:
                connection.request(self.command, path + (f"?{query}" if query else ""), body or None, headers)
                response = connection.getresponse()
            except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
                gate.release(connection)
                gate.note(f"{self.command} {path} -> failed: {type(exc).__name__}")
                self._fail(502, f"the rig's gateway could not reach the provider: {type(exc).__name__}")
                return
            gate.note(f"{self.command} {path} -> {response.status}")
            try:
                self._relay(response)
            except (OSError, http.client.HTTPException):
                pass  # the agent went away, or the upstream cut its stream: the connection ends here
            finally:
                gate.release(connection)
            self.close_connection = True

        def _upstream_host(self) -> str:
            parts = gate.upstream
            default = 443 if parts.scheme == "https" else 80
            host = str(parts.hostname)
            return host if parts.port in (None, default) else f"{host}:{parts.port}"

        def _body(self) -> bytes:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                return self._chunked_body()
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                raise ValueError(f"request body over {_MAX_BODY} bytes")
            return self.rfile.read(length) if length else b""

        def _chunked_body(self) -> bytes:
            body = bytearray()
            while True:
                size = int(self.rfile.readline(100).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline(100)
                    return bytes(body)
                if len(body) + size > _MAX_BODY:
                    raise ValueError(f"request body over {_MAX_BODY} bytes")
                body += self.rfile.read(size)
                self.rfile.readline(100)

        def _relay(self, response: http.client.HTTPResponse) -> None:
            self.send_response_only(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() not in _HOP_BY_HOP or name.lower() == "content-length":
                    self.send_header(name, value)
            self.send_header("Connection", "close")
            self.end_headers()
            while chunk := response.read1(_CHUNK):
                self.wfile.write(chunk)
                self.wfile.flush()

        def _fail(self, status: int, message: str) -> None:
            payload = ('{"error": {"message": "' + message.replace('"', "'") + '"}}').encode()
            self.send_response_only(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload)
            self.close_connection = True

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _forward

    return Handler

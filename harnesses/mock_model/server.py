"""The HTTP side of the mock model: a threaded server on 127.0.0.1, faults, usage and the ledger.

Each wire protocol (one module each) knows its path, how many model turns a request's history
already holds (so the server is stateless per conversation: a retried request gets the same step),
which requests are side requests, and how to stream one step as server-sent events; it is made with
the tool map of the harness it serves (see `tools`), which turns a step into that harness's tool call.

Side requests are those a harness sends besides its agent loop (a title, a summary, a quota
check): they are answered with a short text and no usage, and the ledger records them with the
outcome `side`, so that every reader comparing `served` entries with parsed metrics leaves them
out. They count for no fault's `first_n` either: a fault on the first n requests hits the agent's.

Summarization requests are those a harness sends to compact its context (`SUMMARY_MARKERS`: words of
the harness's own summarization prompt): they are answered with `SUMMARY_TEXT` and the server's
usage, and the ledger records them with the outcome `summary`, apart from `served`, so that a test
can count a run's compactions in the ledger and the readers comparing `served` entries with parsed
metrics leave them out (a harness may or may not count them in its totals). Like side requests, they
count for no fault's `first_n`.

A protocol's `path` is matched exactly, or is a pattern whose `{name}` placeholders each stand for
a run of characters other than `/` and `:` (an API that names the model in the path and the method
after a colon, `/v1beta/models/{model}:{method}`); the server hands the values to the protocol in
the request, under `PATH_PARAMS`.
"""

import json
import re
import threading
from dataclasses import asdict, dataclass, field, replace
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal, Protocol
from urllib.parse import parse_qs, urlsplit

from harnesses.mock_model.policy import ContextSensitivePolicy, Policy, Step
from harnesses.mock_model.tools import ToolCall

FaultMode = Literal["none", "http_error", "silence", "never_answer", "cut_stream"]
Outcome = Literal["served", "side", "summary", "http_error", "silence", "never_answer", "cut_stream"]
KeyState = Literal["ok", "missing", "wrong"]
# Where the providers' SDKs put a key: Anthropic's x-api-key, OpenAI's Authorization Bearer,
# Google's x-goog-api-key (or the `key` query parameter).
KEY_HEADERS = ("x-api-key", "authorization", "x-goog-api-key")
# What a side request gets: a plain answer that calls no tool (and no usage, see NO_USAGE).
SIDE_TEXT = "OK"
SIDE_STEP = Step("final", text=SIDE_TEXT)
# Words of each harness's summarization prompt: Pi 0.73.1's system prompt (compaction/utils.js),
# Claude Code 2.1.332's last user message, OpenCode 1.18.33's template rules (in its first and its
# later summaries alike) and Gemini CLI 0.61.0's compression system instruction (its snapshot
# request and the verification request after it both carry it).
SUMMARY_MARKERS = (
    "You are a context summarization assistant.",
    "Your task is to create a detailed summary of the conversation so far",
    "Do not mention the summary process or that context was compacted.",
    "You are a specialized system component responsible for distilling chat history into a structured XML",
    # Codex's compaction prompt.
    "You are performing a CONTEXT CHECKPOINT COMPACTION.",
)
# Claude Code keeps what is inside <summary>; Pi keeps the whole text.
SUMMARY_TEXT = (
    "<analysis>The task, and the steps taken so far.</analysis>\n"
    "<summary>\n## Goal\nFinish the task.\n\n## Progress\n### Done\n- [x] Read README.md\n</summary>\n"
)
SUMMARY_STEP = Step("final", text=SUMMARY_TEXT)
# The request key holding a pattern path's placeholder values (see the module docstring).
PATH_PARAMS = "_path"
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Usage:
    """Token usage the mock reports for every response it serves."""

    input: int = 1200
    output: int = 150
    cache_read: int = 800
    cache_write: int = 0
    reasoning: int = 0


NO_USAGE = Usage(0, 0, 0, 0, 0)


@dataclass(frozen=True)
class Faults:
    """How the mock misbehaves: on every request, or only on the first `first_n`."""

    mode: FaultMode = "none"
    status: int = 500
    first_n: int | None = None
    after_events: int = 1
    # The Retry-After (seconds) an HTTP error carries. Unset: 0 with 429 and 529, which providers
    # send it with, none with other statuses; set: with any status (providers may send one with a
    # 5xx too, and a harness that honours it retries that much sooner).
    retry_after_s: float | None = None

    def retry_after(self) -> str | None:
        """The Retry-After header of an HTTP error, or None to send none."""
        if self.retry_after_s is not None:
            return f"{self.retry_after_s:g}"
        return "0" if self.status in (429, 529) else None

    def applies(self, request_index: int) -> bool:
        """Whether the `request_index`-th request of the agent's conversation fails."""
        return self.mode != "none" and (self.first_n is None or request_index < self.first_n)

    def applies_to_side_requests(self) -> bool:
        """Whether side requests fail too: only when every request does (an outage)."""
        return self.mode != "none" and self.first_n is None


@dataclass
class LedgerEntry:
    """One request the mock answered (or failed on purpose), with what it sent.

    `served`: a response of the agent's conversation streamed in full; `side`: a side request
    answered in full (never part of what a harness's parsed metrics count); `summary`: a
    summarization request (a compaction) answered in full; else the fault.
    """

    protocol: str
    turn: int
    outcome: Outcome
    status: int
    step_kind: str | None = None
    tool: str | None = None
    usage: Usage | None = None
    model: str | None = None
    """The model the request asked for (its body's `model`, or the model in its path)."""
    thinking: str | None = None
    """The reasoning the request asked for, as its protocol reads it (`WireProtocol.thinking`)."""
    tools: list[str] | None = None
    """The names of the tools the request offered the model, in its order."""
    key: KeyState | None = None
    """Whether the request carried the key the mock expects (`api_key`): ok, missing or wrong
    (never the key itself); None when it expects none."""


def requested_model(request: dict) -> str | None:
    """The model a request names: in its body (OpenAI, Anthropic) or in its path (Gemini)."""
    model = request.get("model")
    if model is None:
        model = (request.get(PATH_PARAMS) or {}).get("model")
    return str(model) if model is not None else None


class WireProtocol(Protocol):
    name: str
    path: str  # exact, or a pattern with `{name}` placeholders (see the module docstring)

    def turn(self, request: dict) -> int:
        """How many model responses the conversation in `request` already contains."""
        ...

    def tool_call(self, step: Step, request: dict) -> ToolCall | None:
        """The harness's tool call a step becomes (its tool map's), or None for a final answer."""
        ...

    def events(self, step: Step, usage: Usage, request: dict, response_id: str) -> list[bytes]:
        """The whole streamed response for one step, as encoded SSE events."""
        ...

    def error_body(self, status: int) -> dict:
        """The JSON error body this provider sends with an HTTP error."""
        ...

    def is_side_request(self, request: dict) -> bool:
        """Whether a request is outside the agent's conversation (see the module docstring)."""
        ...

    def thinking(self, request: dict) -> str | None:
        """The reasoning a request asks for: an effort or level as a word (`high`), `off`, a budget
        the provider gives no word for (`4096 tokens`), or None when the request names none."""
        ...

    def offered_tools(self, request: dict) -> list[str]:
        """The names of the tools a request offers the model."""
        ...


def sse(data: dict | str, event: str | None = None) -> bytes:
    """Encode one server-sent event."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


@dataclass
class MockModelServer:
    """A mock model provider. Use as a context manager; `base_url` is valid once started.

    `protocols` are served on their paths, each made with the tool map of the harness it serves
    (`harnesses.registry.mock_protocols` gives those of every calibrated harness).
    """

    policy: Policy | ContextSensitivePolicy
    protocols: list[WireProtocol]
    usage: Usage = field(default_factory=Usage)
    later_usage: Usage | None = None
    """The usage of every agent response after the first and of every summary, when it differs from
    `usage`: a context that fills once and stays small after a compaction (a harness that compacts
    whenever the last response filled its window would otherwise compact after every response)."""
    faults: Faults = field(default_factory=Faults)
    ledger: list[LedgerEntry] = field(default_factory=list)
    listen_port: int = 0
    api_key: str | None = None
    """The key every request must carry (answered 401 without it), as a real provider checks its
    own; None: any request is served."""

    def __post_init__(self) -> None:
        self._routes = {p.path: p for p in self.protocols if not _PLACEHOLDER.search(p.path)}
        self._patterns = [(_path_pattern(p.path), p) for p in self.protocols if _PLACEHOLDER.search(p.path)]
        self._lock = threading.Lock()
        self._requests = 0
        self._side_requests = 0
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._resolved: Policy | None = self.policy if isinstance(self.policy, Policy) else None
        self.resolution: dict | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the mock model server is not running")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "MockModelServer":
        """Listen on a free port of 127.0.0.1 and serve in a background thread."""
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.listen_port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="mock-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; requests held open on purpose are released."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "MockModelServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def served(self) -> list[LedgerEntry]:
        """Ledger entries of the agent's conversation whose response was streamed in full."""
        with self._lock:
            return [e for e in self.ledger if e.outcome == "served"]

    def totals(self) -> dict[str, int]:
        """Sum of the usage of every fully served response, and their count."""
        entries = self.served()
        totals = {key: 0 for key in asdict(Usage())}
        for entry in entries:
            for key, value in asdict(entry.usage or NO_USAGE).items():
                totals[key] += value
        totals["responses"] = len(entries)
        return totals

    def tool_calls(self) -> dict[str, int]:
        """Tool calls served, by the harness's tool name."""
        counts: dict[str, int] = {}
        for entry in self.served():
            if entry.tool:
                counts[entry.tool] = counts.get(entry.tool, 0) + 1
        return counts

    def usage_of(self, index: int) -> Usage:
        """The usage reported for the agent's request `index` (see `later_usage`)."""
        return self.later_usage if index and self.later_usage is not None else self.usage

    def route(self, path: str) -> tuple[WireProtocol, dict[str, str]] | None:
        """The protocol serving `path` (without its query) and its placeholder values, if any serves it."""
        if path in self._routes:
            return self._routes[path], {}
        for pattern, protocol in self._patterns:
            match = pattern.fullmatch(path)
            if match:
                return protocol, match.groupdict()
        return None

    def is_side_request(self, protocol: WireProtocol, request: dict, text: str) -> bool:
        """Whether a request is outside the agent's conversation: the protocol says so, or a
        context-sensitive policy's task prompt is not in it (`text`, see `request_text`)."""
        if protocol.is_side_request(request):
            return True
        return isinstance(self.policy, ContextSensitivePolicy) and not self.policy.carries_prompt(text)

    def concrete_policy(self, text: str) -> Policy:
        """The policy of this conversation; a context-sensitive one decides on its first request.

        Only requests of the agent's conversation come here (`text` is the request's, see
        `request_text`), so side requests sent before it cannot decide.
        """
        with self._lock:
            if self._resolved is None:
                assert isinstance(self.policy, ContextSensitivePolicy)
                self._resolved, self.resolution = self.policy.resolve(text)
            return self._resolved

    def _next_request_index(self, side: bool) -> int:
        """The index of a request among the agent's requests (or among the side requests)."""
        with self._lock:
            if side:
                self._side_requests += 1
                return self._side_requests - 1
            index = self._requests
            self._requests += 1
            return index

    def key_state(self, headers: Message, query: str) -> KeyState | None:
        """Whether a request with `headers` and `query` carries `api_key`; None when none is expected."""
        if self.api_key is None:
            return None
        given = [headers.get(name, "") for name in KEY_HEADERS] + parse_qs(query).get("key", [])
        given = [value.removeprefix("Bearer ").strip() for value in given if value]
        if not given:
            return "missing"
        return "ok" if self.api_key in given else "wrong"

    def _record(self, entry: LedgerEntry) -> None:
        with self._lock:
            self.ledger.append(entry)


def _path_pattern(path: str) -> re.Pattern[str]:
    """A path pattern as a regular expression: each `{name}` a named group of characters but `/` and `:`."""
    parts = _PLACEHOLDER.split(path)
    # split() alternates literal text and placeholder names.
    return re.compile(
        "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/:]+)" for i, part in enumerate(parts))
    )


def request_text(request: object) -> str:
    """Every string of a parsed request body, one per line: the text a model would read, with no
    JSON escapes in the way of a search for the prompt or a context file's words."""
    if isinstance(request, str):
        return request
    if isinstance(request, dict):
        request = list(request.values())
    if isinstance(request, list):
        return "\n".join(text for item in request if (text := request_text(item)))
    return ""


def _handler_for(server: MockModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        key: KeyState | None = None

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
            pass

        def _not_found(self) -> None:
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(b'{"error":{"message":"not found"}}')

        do_GET = do_HEAD = _not_found

        def do_POST(self) -> None:
            # The absolute form (`POST http://host:port/path`) is what a client sends through an HTTP
            # proxy (the rig's egress proxy relays it as it is); a server must accept it (RFC 9112).
            route = server.route(urlsplit(self.path).path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if route is None:
                self._not_found()
                return
            protocol, params = route
            try:
                request = json.loads(body or b"{}")
            except ValueError:
                request = {}
            if params:
                request = {**(request if isinstance(request, dict) else {}), PATH_PARAMS: params}
            self.key = server.key_state(self.headers, urlsplit(self.path).query)
            if self.key not in (None, "ok"):
                self._unauthorized(protocol, protocol.turn(request))
                return
            text = request_text(request)
            summary = any(marker in text for marker in SUMMARY_MARKERS)
            side = summary or server.is_side_request(protocol, request, text)
            index = server._next_request_index(side)
            turn = protocol.turn(request)
            faults = server.faults
            if summary:
                step, usage, response_id = SUMMARY_STEP, server.usage_of(1), f"mock-summary-{index}"
                faulted = faults.applies_to_side_requests()
            elif side:
                step, usage, response_id = SIDE_STEP, NO_USAGE, f"mock-side-{index}"
                faulted = faults.applies_to_side_requests()
            else:
                step, usage, response_id = (
                    server.concrete_policy(text).step(turn),
                    server.usage_of(index),
                    f"mock-{index}",
                )
                faulted = faults.applies(index)
            if faulted:
                self._misbehave(protocol, turn, faults, request, step, usage)
                return
            events = protocol.events(step, usage, request, response_id)
            self._start_stream(protocol, request)
            for event in events:
                self.wfile.write(event)
                self.wfile.flush()
            outcome: Outcome = "summary" if summary else "side" if side else "served"
            call = protocol.tool_call(step, request)
            tool = call.name if call is not None else None
            self._record(
                LedgerEntry(
                    protocol.name,
                    turn,
                    outcome,
                    200,
                    step.kind,
                    tool,
                    usage,
                    requested_model(request),
                    protocol.thinking(request),
                    protocol.offered_tools(request),
                )
            )

        def _record(self, entry: LedgerEntry) -> None:
            server._record(replace(entry, key=self.key))

        def _unauthorized(self, protocol: WireProtocol, turn: int) -> None:
            # Recorded before it is answered, as an HTTP error is: a retry may come at once.
            self._record(LedgerEntry(protocol.name, turn, "http_error", 401))
            payload = json.dumps(protocol.error_body(401)).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _start_stream(self, protocol: WireProtocol, request: dict) -> None:
            self.send_response(200)
            # A protocol may answer a non-streaming request (a harness's fallback) with plain JSON.
            content_type = getattr(protocol, "content_type", None)
            self.send_header("Content-Type", content_type(request) if content_type else "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()

        def _misbehave(
            self, protocol: WireProtocol, turn: int, faults: Faults, request: dict, step: Step, usage: Usage
        ) -> None:
            if faults.mode == "http_error":
                # Recorded before it is answered: the harness's retry may reach another handler
                # thread before this one could record anything after writing.
                self._record(LedgerEntry(protocol.name, turn, "http_error", faults.status))
                payload = json.dumps(protocol.error_body(faults.status)).encode()
                self.send_response(faults.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                if (retry_after := faults.retry_after()) is not None:
                    self.send_header("Retry-After", retry_after)
                    # OpenAI's header in milliseconds, which OpenCode's own retries honour before
                    # Retry-After (a "0" makes its five retries cost nothing).
                    self.send_header("retry-after-ms", f"{float(retry_after) * 1000:g}")
                self.end_headers()
                self.wfile.write(payload)
                return
            self._record(
                LedgerEntry(protocol.name, turn, faults.mode, 200 if faults.mode != "never_answer" else 0)
            )
            if faults.mode == "never_answer":
                server._stopping.wait()
                return
            events = protocol.events(step, usage, request, "mock-fault")
            if faults.mode == "cut_stream" and len(events) <= faults.after_events:
                # A whole answer in one body (a harness's non-streaming fallback) is cut inside it,
                # or the fallback would get the complete answer a cut must withhold.
                body = b"".join(events)
                events = [body[: len(body) // 2]]
            self._start_stream(protocol, request)
            for event in events[: faults.after_events]:
                self.wfile.write(event)
                self.wfile.flush()
            if faults.mode == "silence":
                server._stopping.wait()
            self.close_connection = True

    return Handler

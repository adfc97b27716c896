"""The agent's stdout read as JSON events while it runs, by the rules that watch it.

Three rules read the stream as it arrives: the run budget (rig.confine.run_budget, from the usage
each event reports), the after-final rule (`FinalWatch`, from the event an adapter declares its
final answer: `final_event`) and the failing-provider rule (`FailureStreak`, from the events an
adapter declares a model request's end by: `failed_request`). Each is a `JsonLines`: bytes in,
complete lines out, every line that is a JSON object handed to `event`. A line too long is skipped
(its bytes are still logged), so the memory a rule holds stays bounded.
"""

import json
from collections.abc import Callable
from typing import Any

# No harness writes an event a rule needs in a line this long.
MAX_LINE_BYTES = 8 * 1024 * 1024

# Consecutive failed model requests after which a harness that keeps retrying is ended: a
# provider failing this often is down, and a harness that never gives up (OpenCode on cut
# streams: thousands of requests in minutes) would otherwise spend the whole wall timeout.
FAILED_REQUESTS_LIMIT = 10

FinalEvent = Callable[[dict[str, Any]], bool]
"""An adapter's test of one stdout event: whether it carries the harness's final answer."""

FailedRequest = Callable[[dict[str, Any]], bool | None]
"""An adapter's test of one stdout event: True when it reports a model request that failed, False
when it reports a model response, None when it reports neither."""


class JsonLines:
    """Splits the bytes it is fed into lines and hands each JSON object line to `event`."""

    def __init__(self) -> None:
        self._line = bytearray()
        self._skipping = False

    @property
    def done(self) -> bool:
        """Whether the rule needs no more events (it then reads nothing more)."""
        return False

    def event(self, event: dict[str, Any]) -> None:
        """Take one JSON object of the stream."""
        raise NotImplementedError

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the stream."""
        while data and not self.done:
            end = data.find(b"\n")
            part, data = (data, b"") if end < 0 else (data[:end], data[end + 1 :])
            if not self._skipping:
                self._line += part
                if len(self._line) > MAX_LINE_BYTES:
                    self._line.clear()
                    self._skipping = True
            if end >= 0:
                if not self._skipping:
                    self._parse(bytes(self._line))
                self._line.clear()
                self._skipping = False

    def _parse(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        if isinstance(event, dict):
            self.event(event)


class FinalWatch(JsonLines):
    """Whether the stream has carried the harness's final answer (`is_final`), as it arrives."""

    def __init__(self, is_final: FinalEvent) -> None:
        super().__init__()
        self.is_final = is_final
        self.seen = False

    @property
    def done(self) -> bool:
        return self.seen

    def event(self, event: dict[str, Any]) -> None:
        self.seen = bool(self.is_final(event))


class FailureStreak(JsonLines):
    """The model requests that failed in a row (`failed`), as the stream reports them; `tripped`
    once they reach `limit` with no response between them."""

    def __init__(self, failed_request: FailedRequest, limit: int = FAILED_REQUESTS_LIMIT) -> None:
        super().__init__()
        self.failed_request = failed_request
        self.limit = limit
        self.failed = 0

    @property
    def tripped(self) -> bool:
        """Whether `limit` requests in a row have failed."""
        return self.failed >= self.limit

    @property
    def done(self) -> bool:
        return self.tripped

    def event(self, event: dict[str, Any]) -> None:
        # The count that ended the run is what the record says, whatever else one read held.
        if self.tripped:
            return
        verdict = self.failed_request(event)
        if verdict is not None:
            self.failed = self.failed + 1 if verdict else 0


def tap(*rules: JsonLines | None) -> Callable[[bytes], None] | None:
    """One stream tap that feeds every rule given (None: no rule reads the stream)."""
    active = [rule for rule in rules if rule is not None]
    if not active:
        return None

    def feed(data: bytes) -> None:
        for rule in active:
            rule.feed(data)

    return feed

"""The agent's stdout read as JSON events while it runs, by the rules that watch it.

Two rules read the stream as it arrives: the run budget (rig.confine.run_budget, from the usage
each event reports) and the after-final rule (`FinalWatch`, from the event an adapter declares its
final answer: `final_event`). Each is a `JsonLines`: bytes in, complete lines out, every line that
is a JSON object handed to `event`. A line too long is skipped (its bytes are still logged), so
the memory a rule holds stays bounded.
"""

import json
from collections.abc import Callable
from typing import Any

# No harness writes an event a rule needs in a line this long.
MAX_LINE_BYTES = 8 * 1024 * 1024

FinalEvent = Callable[[dict[str, Any]], bool]
"""An adapter's test of one stdout event: whether it carries the harness's final answer."""


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


def tap(*rules: JsonLines | None) -> Callable[[bytes], None] | None:
    """One stream tap that feeds every rule given (None: no rule reads the stream)."""
    active = [rule for rule in rules if rule is not None]
    if not active:
        return None

    def feed(data: bytes) -> None:
        for rule in active:
            rule.feed(data)

    return feed

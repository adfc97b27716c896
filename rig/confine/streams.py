"""Bounded capture of an agent's stdout and stderr: the head on disk, the tail in a ring.

A harness that writes gigabytes must neither fill the disk nor the runner's memory. Each stream
keeps its first `head_bytes` in the log file as they arrive and its last `tail_bytes` in memory;
when the stream ends, a one-line marker saying how much was left out is written after the head,
followed by the tail. Parsers of JSON-lines logs skip the marker and the partial lines around it.
"""

from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from rig.schema import StreamStats


class BoundedStream:
    """One stream's log file: head written through, tail held back until `close`."""

    def __init__(
        self,
        path: Path,
        name: str,
        head_bytes: int,
        tail_bytes: int,
        tap: Callable[[bytes], None] | None = None,
    ) -> None:
        self.path = path
        self.name = name
        self.head_bytes = head_bytes
        self.tail_bytes = tail_bytes
        self.total = 0
        # Sees every byte as it arrives, whatever the log keeps (a run budget's usage meter).
        self.tap = tap
        self._written = 0
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self._file: BinaryIO = path.open("wb")

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the stream."""
        self.total += len(data)
        if self.tap is not None:
            self.tap(data)
        room = self.head_bytes - self._written
        if room > 0:
            self._file.write(data[:room])
            self._written += min(room, len(data))
            data = data[room:]
        if data and self.tail_bytes > 0:
            self._tail.append(data)
            self._tail_size += len(data)
            while self._tail_size - len(self._tail[0]) >= self.tail_bytes:
                self._tail_size -= len(self._tail.popleft())

    def close(self) -> StreamStats:
        """Write the omission marker and the tail; the file is complete afterwards."""
        tail = b"".join(self._tail)[-self.tail_bytes :] if self.tail_bytes > 0 else b""
        omitted = self.total - self._written - len(tail)
        if omitted > 0:
            marker = (
                f"\n[rig: {omitted} bytes of {self.name} omitted; kept the first {self._written} "
                f"and the last {len(tail)} of {self.total}]\n"
            )
            self._file.write(marker.encode())
        self._file.write(tail)
        self._file.close()
        self._tail.clear()
        return StreamStats(bytes=self.total, kept_bytes=self._written + len(tail), truncated=omitted > 0)

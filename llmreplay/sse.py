"""Incremental Server-Sent Events splitter over raw bytes, shared by the recorder and the replayer.

Pure and allocation-light: feed it socket reads split anywhere (inside a line, a `\\r\\n` pair or a
UTF-8 sequence); it returns each complete event's `data` payload. Imports nothing from the stages.
"""

from __future__ import annotations

_CR = 13


class SSESplitter:
    """Reassembles events from arbitrary chunks; yields the joined `data:` lines of each event.

    Follows the WHATWG rules that matter here: lines end in `\\n`, `\\r\\n` or `\\r`; a blank line
    dispatches the event; several `data:` lines join with `\\n`; comment lines (`:`) and other fields
    (`event:`, `id:`, `retry:`) are skipped; an event without data is not dispatched.
    """

    __slots__ = ("_partial", "_data", "_skip_lf", "buffered_bytes_max")

    def __init__(self) -> None:
        self._partial = b""  # bytes of an unterminated line
        self._data: list[bytes] = []  # data lines of the event being assembled
        self._skip_lf = False  # the previous chunk ended in \r, so a leading \n belongs to it
        self.buffered_bytes_max = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        """Data payloads of the events completed by `chunk`, in order."""
        if not self._partial and not self._data and not self._skip_lf and chunk.endswith(b"\n\n"):
            fast = _whole_single_line_events(chunk)
            if fast is not None:
                return fast
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return []
        cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if cut < 0:
            self._partial += chunk
            self.buffered_bytes_max = max(self.buffered_bytes_max, len(self._partial))
            return []
        complete = self._partial + chunk[: cut + 1] if self._partial else chunk[: cut + 1]
        self._partial = chunk[cut + 1 :]
        if chunk[cut] == _CR and cut == len(chunk) - 1:
            self._skip_lf = True
        return self._lines(complete.splitlines())

    def finish(self) -> list[bytes]:
        """At end of stream: the last event, even without its closing blank line."""
        lines = [self._partial] if self._partial else []
        lines.append(b"")
        self._partial = b""
        self._skip_lf = False
        return self._lines(lines)

    def _lines(self, lines: list[bytes]) -> list[bytes]:
        events: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data = self._data = []
            elif line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line == b"data":  # a field name alone means an empty value
                data.append(b"")
        return events


def _whole_single_line_events(chunk: bytes) -> list[bytes] | None:
    """The common read: whole `data: ...` events, one line each, `\n` endings. None: take the general path."""
    if chunk.find(b"\r") >= 0:  # not `in`: bytes.__contains__ first raises and clears a TypeError
        return None
    events = []
    for block in chunk[:-2].split(b"\n\n"):
        if not block.startswith(b"data: ") or block.find(b"\n") >= 0:
            return None
        events.append(block[6:])
    return events

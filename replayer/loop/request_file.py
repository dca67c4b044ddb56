"""A worker's requests on disk: one flat file of request tails in plan order plus a small file of
compact fields. The part common to every request (which may hold the API key) is prepended in
memory, so no secret is ever written (docs/design/replay-memory.md)."""

from __future__ import annotations

import os
import pickle
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llmreplay.output_paths import publish, temp_path
from replayer.loop.http_pool import HEADER_END, Endpoint, encode_request

# encode_request's request line and Host header for an empty endpoint and path: cut from its output
# to keep only the tail, so tails get exactly its header validation and layout.
_BARE = Endpoint("", 0, False, "", "")
_BARE_HEAD_BYTES = len(b"POST  HTTP/1.1\r\nHost: \r\n")
_NO_BODY_TRAILER = b"Content-Length: 0\r\n\r\n"


def encode_tail(headers: Sequence[tuple[str, str]], body: bytes) -> bytes:
    """The per-request part of a request: its own headers, Content-Length, blank line, body."""
    return encode_request(_BARE, "POST", "", headers, body)[_BARE_HEAD_BYTES:]


def encode_head(endpoint: Endpoint, path: str, headers: Sequence[tuple[str, str]]) -> bytes:
    """The part every request of `path` shares (request line, Host, the run's headers): head + tail
    is the request encode_request would have built."""
    return encode_request(endpoint, "POST", path, headers, b"")[: -len(_NO_BODY_TRAILER)]


def encode_heads(
    endpoint: Endpoint, fields: RequestFields, headers: Sequence[tuple[str, str]]
) -> list[bytes]:
    """The head of every path of a request file, by path code (what RequestSource prepends)."""
    return [encode_head(endpoint, path, headers) for path in fields.paths]


def tail_body(tail: bytes | memoryview) -> bytes:
    """The JSON body of a tail (header values never hold a line break, so the first blank line ends them)."""
    data = bytes(tail)
    return data[data.index(HEADER_END) + len(HEADER_END) :]


def tail_start(ends: array, index: int) -> int:
    """Offset of tail `index` in the tails file (each starts where the previous ends); also where
    the tails before it end, so `tail_start(ends, len(ends))` is the file's size."""
    return ends[index - 1] if index else 0


@dataclass(frozen=True, slots=True)
class RequestFields:
    """Per-request fields of a worker's request file, by plan index (a few bytes a request)."""

    ends: array  # "q": end offset of each tail in the tails file (a tail starts where the previous ends)
    path_codes: bytes  # into `paths`
    paths: tuple[str, ...]
    streams: bytes  # 1: the request asks for a stream
    requested_tokens: array  # "q": max_tokens sent, -1 when none
    model_codes: array  # "I": into `models`
    models: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.ends)

    def span(self, index: int) -> tuple[int, int]:
        """Where request `index`'s tail lies in the tails file: (offset, length)."""
        start = tail_start(self.ends, index)
        return start, self.ends[index] - start

    def path(self, index: int) -> str:
        return self.paths[self.path_codes[index]]

    def model(self, index: int) -> str:
        return self.models[self.model_codes[index]]

    def requested(self, index: int) -> int | None:
        value = self.requested_tokens[index]
        return None if value < 0 else value


def read_fields(path: str | Path) -> RequestFields:
    with open(path, "rb") as handle:  # our own file, written moments ago by this run
        return pickle.load(handle)


def private(path, flags: int) -> int:
    """An `opener` creating the file 0600: a run's hand-off files are read by its own processes only."""
    return os.open(path, flags, 0o600)


class RequestFileWriter:
    """Appends tails in plan order; `close` makes both files appear complete under their names."""

    def __init__(self, tails_path: str | Path, fields_path: str | Path):
        self._tails_path = Path(tails_path)
        self._fields_path = Path(fields_path)
        self._tmp = temp_path(self._tails_path)
        self._out = open(self._tmp, "wb", buffering=1 << 20, opener=private)  # bodies: the trace's content
        self._ends = array("q")
        self._path_codes = bytearray()
        self._streams = bytearray()
        self._requested = array("q")
        self._model_codes = array("I")
        self._codes: dict[tuple[str, str], int] = {}  # ("path"|"model", value) -> code
        self._paths: list[str] = []
        self._models: list[str] = []
        self._written = 0

    def add(
        self,
        path: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        stream: bool,
        requested: int | None,
        model: str,
    ) -> None:
        tail = encode_tail(headers, body)
        self._out.write(tail)
        self._written += len(tail)
        self._ends.append(self._written)
        self._path_codes.append(self._code("path", path, self._paths))
        self._streams.append(1 if stream else 0)
        self._requested.append(-1 if requested is None else requested)
        self._model_codes.append(self._code("model", model, self._models))

    def _code(self, kind: str, value: str, names: list[str]) -> int:
        code = self._codes.get((kind, value))
        if code is None:
            code = self._codes[(kind, value)] = len(names)
            names.append(value)
        return code

    def close(self) -> None:
        try:
            self._out.close()
            fields = RequestFields(
                self._ends,
                bytes(self._path_codes),
                tuple(self._paths),
                bytes(self._streams),
                self._requested,
                self._model_codes,
                tuple(self._models),
            )
            dump_pickle_atomic(self._fields_path, fields)
            publish(self._tmp, self._tails_path, durable=False)  # a hand-off within the run
        finally:
            self._tmp.unlink(missing_ok=True)

    def abort(self) -> None:
        self._out.close()
        self._tmp.unlink(missing_ok=True)


def dump_pickle_atomic(path: Path, *values) -> None:
    """A hand-off file between the run's processes (one pickle per value, read back in order):
    complete under its name, or absent."""
    tmp = temp_path(path)
    try:
        with open(tmp, "wb", opener=private) as handle:
            for value in values:
                pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        publish(tmp, path, durable=False)
    finally:
        tmp.unlink(missing_ok=True)

"""Bounded incremental decoders for compressed bodies, used only to parse; the bytes forwarded stay as sent.

gzip/deflate via zlib, br via brotli and zstd via the zstd module (both installed with mitmproxy).
Every decoder runs in the converter process, never on the proxy's event loop, and is bounded: it
produces output in steps of at most STEP_BYTES and raises DecodeLimit as soon as the output passes
its limit, or passes MAX_DECODE_RATIO times the input once past RATIO_FREE_BYTES. A 261 KB gzip body
that decodes to 256 MB therefore costs one step past the limit, never 256 MB of memory
(docs/bad-input.md#compressed-request-bodies).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

Decoder = Callable[[bytes], bytes]

MAX_DECODED_BYTES = 16 * 1024 * 1024  # default bound on a decoded body (the recorder's max_request_bytes)
MAX_DECODE_RATIO = 200  # decoded bytes per encoded byte beyond RATIO_FREE_BYTES: JSON compresses 5-50x
RATIO_FREE_BYTES = 1024 * 1024  # a small body is never judged by its ratio
STEP_BYTES = 1024 * 1024  # output per decompress call: memory and time between checks stay small


class DecodeLimit(ValueError):
    """The body decodes to more than the recorder parses; its message says which bound it passed."""


def make_decoder(
    content_encoding: str | None, limit_bytes: int = MAX_DECODED_BYTES, ratio: int = MAX_DECODE_RATIO
) -> Decoder | None:
    """A function turning successive encoded reads into decoded bytes; None for identity.

    Raises ValueError for an encoding it cannot decode (the caller records the row without parsing);
    the function raises DecodeLimit once the output passes `limit_bytes` or `ratio` times the input.
    """
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("identity", ""):
        return None
    if encoding in ("gzip", "x-gzip"):
        step = _zlib_step(zlib.decompressobj(16 + zlib.MAX_WBITS))
    elif encoding == "deflate":
        step = _deflate_step()
    elif encoding == "br":
        step = _brotli_step()
    elif encoding == "zstd":
        step = _zstd_step()
    else:
        raise ValueError(f"cannot decode content-encoding {encoding!r}")
    return _Bounded(step, limit_bytes, ratio).feed


def decode_body(
    body: bytes, content_encoding: str | None, limit_bytes: int = MAX_DECODED_BYTES, ratio: int = MAX_DECODE_RATIO
) -> bytes:
    """A whole body decoded within the bounds (DecodeLimit past them, ValueError for a bad encoding)."""
    decode = make_decoder(content_encoding, limit_bytes, ratio)
    return body if decode is None else decode(body)


# a step decoder: step(data) -> (output of at most STEP_BYTES, more output pending without new input)
Step = Callable[[bytes], tuple[bytes, bool]]


class _Bounded:
    __slots__ = ("_step", "_limit", "_ratio", "_in", "_out")

    def __init__(self, step: Step, limit_bytes: int, ratio: int):
        self._step, self._limit, self._ratio = step, limit_bytes, ratio
        self._in = self._out = 0

    def feed(self, data: bytes) -> bytes:
        self._in += len(data)
        allowed = min(self._limit, max(RATIO_FREE_BYTES, self._ratio * self._in))
        parts = []
        more = True
        while more:
            out, more = self._step(data)
            data = b""
            self._out += len(out)
            if self._out > allowed:
                raise DecodeLimit(self._why(allowed))
            parts.append(out)
        return b"".join(parts)

    def _why(self, allowed: int) -> str:
        if allowed >= self._limit:
            return f"decodes to more than {self._limit} bytes (the recorder's limit)"
        return f"decodes to more than {self._ratio}x its {self._in} encoded bytes (a compression bomb)"


def _zlib_step(decoder) -> Step:
    def step(data: bytes) -> tuple[bytes, bool]:
        out = decoder.decompress(decoder.unconsumed_tail + data if data else decoder.unconsumed_tail, STEP_BYTES)
        return out, bool(decoder.unconsumed_tail)

    return step


def _deflate_step() -> Step:
    """HTTP 'deflate' is meant to be zlib-wrapped, but some servers send raw deflate: detect it."""
    state: dict[str, object] = {"head": b""}

    def step(data: bytes) -> tuple[bytes, bool]:
        inner = state.get("step")
        if inner is None:
            data = state["head"] + data
            if len(data) < 2:  # the zlib header is two bytes; wait for both
                state["head"] = data
                return b"", False
            wrapped = (data[0] & 0x0F) == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            inner = state["step"] = _zlib_step(zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS))
        return inner(data)

    return step


def _brotli_step() -> Step:
    import brotli

    decoder = brotli.Decompressor()

    def step(data: bytes) -> tuple[bytes, bool]:
        out = decoder.process(data, output_buffer_limit=STEP_BYTES)
        # a full buffer may hold back output even when it accepts input again: ask until it is drained
        return out, not decoder.can_accept_more_data() or len(out) >= STEP_BYTES

    return step


def _zstd_step() -> Step:
    """A zstd decompressor object refuses input after its frame ends; streams may hold several frames."""
    try:
        from compression import zstd
    except ImportError:
        from backports import zstd
    state = {"d": zstd.ZstdDecompressor(), "rest": b""}

    def step(data: bytes) -> tuple[bytes, bool]:
        data = state["rest"] + data
        state["rest"] = b""
        decoder = state["d"]
        if decoder.eof:
            if not data:
                return b"", False
            decoder = state["d"] = zstd.ZstdDecompressor()
        out = decoder.decompress(data, max_length=STEP_BYTES)
        if decoder.eof and decoder.unused_data:
            state["rest"] = decoder.unused_data  # the next frame
            return out, True
        return out, not decoder.needs_input and not decoder.eof

    return step

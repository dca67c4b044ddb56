"""Incremental decoders for compressed streamed bodies, used only to parse; the bytes forwarded stay as sent.

gzip/deflate via zlib, br via brotli and zstd via the zstd module (both installed with mitmproxy).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

Decoder = Callable[[bytes], bytes]


def make_decoder(content_encoding: str | None) -> Decoder | None:
    """A function turning successive encoded reads into decoded bytes; None for identity.

    Raises ValueError for an encoding it cannot decode (the caller records the row without parsing).
    """
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("identity", ""):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress
    if encoding == "deflate":
        return _deflate()
    if encoding == "br":
        import brotli

        return brotli.Decompressor().process
    if encoding == "zstd":
        return _zstd()
    raise ValueError(f"cannot decode content-encoding {encoding!r}")


def _deflate() -> Decoder:
    """HTTP 'deflate' is meant to be zlib-wrapped, but some servers send raw deflate: detect it."""
    state: dict[str, object] = {"head": b""}

    def decode(data: bytes) -> bytes:
        decoder = state.get("d")
        if decoder is None:
            data = state["head"] + data
            if len(data) < 2:  # the zlib header is two bytes; wait for both
                state["head"] = data
                return b""
            wrapped = (data[0] & 0x0F) == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            decoder = state["d"] = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        return decoder.decompress(data)

    return decode


def _zstd() -> Decoder:
    """A zstd decompressor object refuses input after its frame ends; streams may hold several frames."""
    try:
        from compression import zstd
    except ImportError:
        from backports import zstd
    state = {"d": zstd.ZstdDecompressor()}

    def decode(data: bytes) -> bytes:
        out = []
        while data:
            if state["d"].eof:
                state["d"] = zstd.ZstdDecompressor()
            decoder = state["d"]
            out.append(decoder.decompress(data))
            data = decoder.unused_data if decoder.eof else b""
        return b"".join(out)

    return decode

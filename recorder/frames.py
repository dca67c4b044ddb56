"""The journal's frame codec: a finished Capture (stamps and raw bytes) <-> one length-prefixed frame.

Pure. A frame is `kind, meta length, blob length`, then the meta (JSON of the capture's scalar
fields and read stamps) and the blob (request body followed by the response reads, as received).
"""

from __future__ import annotations

import struct

import orjson

from recorder.capture import AMENDED, Capture, keep_delivered

HEAD = struct.Struct("<cII")
CAPTURE, WATERMARK, SEGMENT_END, RUN_END, AMEND = b"C", b"W", b"E", b"Z", b"A"
_KINDS = frozenset((CAPTURE, WATERMARK, SEGMENT_END, RUN_END, AMEND))
# every slot but the bulky ones (request body, reads), which travel in the blob
_SCALARS = tuple(s for s in Capture.__slots__ if s not in ("request_body", "reads", "on_last_byte"))
# scalars a frame journaled by an earlier version may lack, and the value that meant then
_SINCE = {"pending": False, "request_encoding": None}  # before request_encoding the body came decoded


def encode_capture(cap: Capture) -> bytes:
    body = cap.request_body
    meta = {name: _utf8(getattr(cap, name)) for name in _SCALARS}
    meta["body_bytes"] = -1 if body is None else len(body)
    meta["read_ns"] = [stamp for stamp, _ in cap.reads]
    meta["read_bytes"] = [len(data) for _, data in cap.reads]
    meta_json = orjson.dumps(meta)
    blob = b"".join([body or b"", *(data for _, data in cap.reads)])
    return HEAD.pack(CAPTURE, len(meta_json), len(blob)) + meta_json + blob


def _utf8(value):
    """Header-derived text may hold lone surrogates (mitmproxy decodes with surrogateescape): escape them."""
    if type(value) is str and not value.isascii():
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def encode_watermark(watermark_unix_ns: int) -> bytes:
    meta = orjson.dumps({"watermark_unix_ns": watermark_unix_ns})
    return HEAD.pack(WATERMARK, len(meta), 0) + meta


def encode_amend(cap: Capture) -> bytes:
    """The final outcome of a capture journaled while `pending` (its scalars that may have changed)."""
    meta = orjson.dumps({"request_id": cap.request_id, **{name: getattr(cap, name) for name in AMENDED}})
    return HEAD.pack(AMEND, len(meta), 0) + meta


def apply_amend(cap: Capture, meta_json: bytes) -> None:
    """Settle a pending capture: its final scalars, and its reads cut to what was delivered."""
    meta = orjson.loads(meta_json)
    delivered = meta["captured_bytes"]
    if isinstance(delivered, int) and delivered < cap.captured_bytes:
        keep_delivered(cap, delivered)
    for name in AMENDED:
        setattr(cap, name, meta[name])
    cap.pending = False


def amended_id(meta_json: bytes) -> str:
    return orjson.loads(meta_json)["request_id"]


def encode_marker(kind: bytes) -> bytes:
    return HEAD.pack(kind, 0, 0)


def decode_capture(meta_json: bytes, blob: bytes) -> Capture:
    meta = orjson.loads(meta_json)
    cap = Capture.__new__(Capture)
    for name in _SCALARS:
        setattr(cap, name, meta.get(name, _SINCE[name]) if name in _SINCE else meta[name])
    body_bytes = meta["body_bytes"]
    cap.request_body = None if body_bytes < 0 else blob[:body_bytes]
    offset, reads = max(0, body_bytes), []
    for stamp, size in zip(meta["read_ns"], meta["read_bytes"], strict=True):
        reads.append((stamp, blob[offset : offset + size]))
        offset += size
    if offset != len(blob):
        raise ValueError(f"capture frame: reads cover {offset} of {len(blob)} blob bytes")
    cap.reads = reads
    cap.on_last_byte = None
    return cap


def watermark_of(meta_json: bytes) -> int:
    return orjson.loads(meta_json)["watermark_unix_ns"]


class FrameBuffer:
    """Cuts whole frames out of bytes appended in arbitrary pieces (a file being tailed)."""

    __slots__ = ("_data", "_pos", "damage")

    def __init__(self) -> None:
        self._data = b""
        self._pos = 0
        self.damage: str | None = None  # set when bytes that are not a frame were met; reading stops there

    def feed(self, data: bytes) -> None:
        self._data = self._data[self._pos :] + data if self._pos else self._data + data
        self._pos = 0

    def frames(self) -> list[tuple[bytes, bytes, bytes]]:
        """Every complete (kind, meta, blob) buffered; a torn tail stays for the next feed."""
        out, data, pos, size = [], self._data, self._pos, HEAD.size
        while self.damage is None and len(data) - pos >= size:
            kind, meta_len, blob_len = HEAD.unpack_from(data, pos)
            if kind not in _KINDS:
                self.damage = f"not a journal frame (kind {kind!r})"
                break
            end = pos + size + meta_len + blob_len
            if end > len(data):
                break
            meta_end = pos + size + meta_len
            out.append((kind, data[pos + size : meta_end], data[meta_end:end]))
            pos = end
        self._pos = pos
        return out

    @property
    def pending_bytes(self) -> int:
        return len(self._data) - self._pos

"""Stand-ins for images and audio: tiny valid files that keep a part's type and drop its data.

An image becomes a 1x1 PNG whose colour is a keyed hash of the original, so equal images stay equal
(and prompts keep their sharing) while nothing of the picture remains. Pure; no imports but stdlib.
"""

from __future__ import annotations

import base64
import struct
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_data_url(rgb: bytes) -> str:
    """A 1x1 PNG of colour `rgb` (3 bytes) as a data URL."""
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit, truecolour
    pixels = zlib.compress(b"\x00" + rgb[:3])
    png = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", pixels) + _chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


def silent_wav_base64(milliseconds: int = 100, rate_hz: int = 8000) -> str:
    """Silence as a mono 8-bit WAV, base64-encoded (what `input_audio.data` holds)."""
    samples = rate_hz * milliseconds // 1000
    fmt = struct.pack("<HHIIHH", 1, 1, rate_hz, rate_hz, 1, 8)
    data = b"\x80" * samples
    body = (
        b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    )
    return base64.b64encode(b"RIFF" + struct.pack("<I", len(body)) + body).decode()

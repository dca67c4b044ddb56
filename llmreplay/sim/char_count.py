"""`--prompt-count chars/4`: a server that counts one prompt token per 4 characters of each text, rounded
up, whose tokenizer the client does not have (a hosted API's estimate, an engine llmreplay cannot load).

A Tokenizer for the sim's prompt rendering: each 4-character piece is one id (its CRC-32), so equal text
prefixes still make equal ids and the prefix cache works as with a real tokenizer.
"""

from __future__ import annotations

import zlib

CHARS_PER_TOKEN = 4


class CharsPerToken:
    """Counts ceil(len(text) / 4) tokens per text; ids are the pieces' CRC-32 (not decodable)."""

    id = f"chars/{CHARS_PER_TOKEN}"

    def encode(self, text: str) -> list[int]:
        return [
            zlib.crc32(text[i : i + CHARS_PER_TOKEN].encode("utf-8", "surrogatepass"))
            for i in range(0, len(text), CHARS_PER_TOKEN)
        ]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def count(self, text: str) -> int:
        return -(-len(text) // CHARS_PER_TOKEN)

    def decode(self, ids: list[int]) -> str:
        raise ValueError("chars/4 ids cannot be decoded")

    def vocab_size(self) -> int:
        return 0

"""Import settings: each field's default, flag and help, declared once; `import`'s flags come from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmreplay.options import as_path, force_field, option
from llmreplay.trace_format import DEFAULT_BLOCK_SIZE, MOONCAKE_BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class ImportConfig:
    source: str  # a row of llmreplay.importers IMPORTERS
    input_path: Path
    output_path: Path = option(
        flags=("-o", "--out"), required=True, metavar="FILE", parse=as_path, help="Trace file to write."
    )
    force: bool = force_field()
    block_size: int | None = option(
        None,
        type=int,
        show=f"mooncake {MOONCAKE_BLOCK_SIZE}, ragpulse {DEFAULT_BLOCK_SIZE}",
        help="Tokens per hash id block (mooncake: the file's block size; ragpulse: size of the derived "
        "blocks).",
    )  # None: the source's own

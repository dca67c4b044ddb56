"""Public LLM serving traces in, as shape traces: one reader module per source, and IMPORTERS, the
table the CLI, the pipeline, the docs and the tests iterate (adding a source is adding a row).
This module imports only the standard library: readers load when used.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Importer:
    name: str  # `llmreplay import NAME`, and `importer` in the trace's metadata
    title: str
    reader: str  # "module:function", called as function(path) or function(path, block_size)
    block_ids: bool  # the source carries prefix ids: --block-size applies
    source: str  # where the traces come from (provenance for docs and samples)
    unit: str = "rows"  # what the source's records are called in the summary ("spans")
    directories: bool = False  # FILE may be a directory of such files

    def read(self, path: Path, block_size: int | None):
        """The source file as a SourceRead (llmreplay.importers.source_request)."""
        module, function = self.reader.split(":")
        read = getattr(importlib.import_module(module), function)
        return read(path, block_size) if self.block_ids else read(path)


IMPORTERS: tuple[Importer, ...] = (
    Importer(
        "mooncake",
        "Mooncake",
        "llmreplay.importers.mooncake:read_mooncake",
        True,
        "kvcache-ai/Mooncake FAST25-release/traces (jsonl with 512-token hash_ids)",
    ),
    Importer(
        "azure",
        "Azure LLM inference",
        "llmreplay.importers.azure:read_azure",
        False,
        "Azure/AzurePublicDataset data/ (Splitwise 2023 csv, 2024 week-long files)",
    ),
    Importer(
        "burstgpt",
        "BurstGPT",
        "llmreplay.importers.burstgpt:read_burstgpt",
        False,
        "HPMLL/BurstGPT (csv; v2 adds Session ID and Elapsed time)",
    ),
    Importer(
        "ragpulse",
        "RAGPulse",
        "llmreplay.importers.ragpulse:read_ragpulse",
        True,
        "flashserve/RAGPulse data/ (jsonl with per-component hash ids, numbered length files)",
    ),
    Importer(
        "otel",
        "OpenTelemetry GenAI spans",
        "llmreplay.importers.otel:read_otel",
        False,
        "OTLP JSON exports of gen_ai.* client spans (a collector's file exporter; gzip or zstd)",
        unit="spans",
        directories=True,
    ),
)
BY_NAME = {importer.name: importer for importer in IMPORTERS}

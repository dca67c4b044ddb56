"""Per-bucket latency (input length, streaming, tools, model): where a change is, not only whether.

Each bucket is a mask over both sides' requests; its cells are replayer.compare.latency's, paired
like the whole comparison's.
"""

from __future__ import annotations

import numpy as np

from replayer.compare.config import CellSettings
from replayer.compare.latency import latency_rows
from replayer.measured.requests import RequestColumns
from replayer.measured.samples import samples

INPUT_TOKEN_EDGES = (512, 2048, 8192)
INPUT_TOKEN_LABELS = ("<512", "512-2k", "2k-8k", ">8k")
MAX_MODEL_BUCKETS = 8


def bucket_labels(req: RequestColumns) -> dict[str, np.ndarray]:
    tokens = req.shape_prompt_tokens
    index = np.searchsorted(np.array(INPUT_TOKEN_EDGES), np.nan_to_num(tokens, nan=-1), side="right")
    input_labels = np.array(INPUT_TOKEN_LABELS, dtype=object)[index]
    input_labels[~np.isfinite(tokens)] = "unknown"
    return {
        "input_tokens": input_labels,
        "stream": np.where(req.stream, "stream", "non-stream").astype(object),
        "tools": np.where(req.tools, "with tools", "without tools").astype(object),
        "model": req.model,
        "endpoint": req.endpoint,
    }


def bucket_order(dimension: str, labels: list[np.ndarray]) -> list[str]:
    present = set().union(*(set(lab.tolist()) for lab in labels))
    if dimension == "input_tokens":
        return [b for b in (*INPUT_TOKEN_LABELS, "unknown") if b in present]
    if dimension == "model":
        counts: dict[str, int] = {}
        for lab in labels:
            for value in lab.tolist():
                counts[value] = counts.get(value, 0) + 1
        return sorted(counts, key=lambda k: -counts[k])[:MAX_MODEL_BUCKETS]
    return sorted(present)


def buckets_section(
    b_req: RequestColumns | None,
    b_clusters: np.ndarray | None,
    c_req: RequestColumns,
    c_clusters: np.ndarray,
    clusters: int,
    settings: CellSettings,
    rng: np.random.Generator,
    c_label: str,
    counts: np.ndarray | None = None,
) -> list[dict]:
    """One row per bucket of every dimension with at least two buckets. `*_clusters`: each row's
    request number, shared by the two sides (see replayer.compare.latency.samples)."""
    c_labels = bucket_labels(c_req)
    b_labels = bucket_labels(b_req) if b_req is not None else None
    rows = []
    for dimension, c_lab in c_labels.items():
        sources = [c_lab] if b_labels is None else [b_labels[dimension], c_lab]
        buckets = bucket_order(dimension, sources)
        if len(buckets) < 2:
            continue  # one bucket is the whole run, already shown
        for bucket in buckets:
            c_mask = c_lab == bucket
            b_mask = None if b_labels is None else b_labels[dimension] == bucket
            metrics = latency_rows(
                None if b_mask is None else samples(b_req, b_clusters, b_mask),
                samples(c_req, c_clusters, c_mask),
                clusters,
                settings,
                rng,
                c_label,
                counts,
            )
            rows.append(
                {
                    "dimension": dimension,
                    "bucket": bucket,
                    "baseline_requests": None if b_mask is None else int(b_mask.sum()),
                    "candidate_requests": int(c_mask.sum()),
                    "metrics": metrics,
                }
            )
    return rows

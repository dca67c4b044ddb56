"""How close each replayed prompt came to its recorded length, as the target counted it (usage), and
which were not close: run.json's `summary.prompt_lengths` and a line of the printed summary. Pure over
the results' and the trace's columns, plus the printer. A prompt is verified when the target's
count is within TOLERANCE of the recorded one; the rest are named by layout, never left silent.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rich.markup import escape

from llmreplay.metrics import success_mask

TOLERANCE = 0.02
SHOWN_LAYOUTS = 4


def layout_name(roles, tools: int | None) -> str:
    """`system/user+1 tools`, as the prompt fitter names layouts (replayer.plan.prompt_fit)."""
    return "/".join(roles or ("user",)) + f"+{tools or 0} tools"


def layouts_by_request(batches, wanted: set[str]) -> dict[str, str]:
    """Trace request id -> its layout name, for the `wanted` ids, from record batches of the trace."""
    found: dict[str, str] = {}
    for batch in batches:
        ids = batch.column("request_id").to_pylist()
        messages = batch.column("messages").to_pylist()
        tools = batch.column("tools_count").to_pylist()
        for rid, shapes, n in zip(ids, messages, tools, strict=True):
            if rid in wanted:
                found[rid] = layout_name(tuple(m["role"] for m in shapes or ()), n)
    return found


def length_errors(
    measured: np.ndarray, recorded: np.ndarray, layouts: list[str], tolerance: float = TOLERANCE
) -> dict:
    """The report of relative errors |measured / recorded - 1| (arrays of the requests with both)."""
    error = np.abs(measured - recorded) / np.maximum(recorded, 1.0)
    off = error > tolerance
    by_layout: dict[str, dict] = {}
    for name in sorted(set(layouts)):
        mine = np.array([lay == name for lay in layouts], dtype=bool)
        if not (mine & off).any():
            continue
        by_layout[name] = {
            "requests": int((mine & off).sum()),
            "of": int(mine.sum()),
            "error_p95": float(np.percentile(error[mine], 95)),
            "error_max": float(error[mine].max()),
        }
    points = np.percentile(error, [50, 95]) if error.size else (None, None)
    return {
        "tolerance": tolerance,
        "requests": int(error.size),
        "within_tolerance": int((~off).sum()),
        "error_p50": None if points[0] is None else float(points[0]),
        "error_p95": None if points[1] is None else float(points[1]),
        "error_max": float(error.max()) if error.size else None,
        "verified": bool(error.size) and float(points[1]) <= tolerance,
        "unverified": {"requests": int(off.sum()), "by_layout": by_layout},
    }


def prompt_length_report(results: pa.Table, trace_batches, lengths: dict | None) -> dict:
    """The measured window's successful requests with both counts; `trace_batches`: the trace's record
    batches (request_id, messages, tools_count), for the layouts; `lengths`: how prompts were spelled
    (replayer.target_tokenizer.TokenizerChoice.as_dict(), or None for recorded content as it was)."""
    if "warmup" in results.column_names:
        results = results.filter(pc.invert(pc.fill_null(results.column("warmup"), False)))
    ok = success_mask(results)
    measured = np.asarray(
        pc.cast(results.column("prompt_tokens"), pa.float64()).to_numpy(zero_copy_only=False)
    )
    recorded = np.asarray(
        pc.cast(results.column("recorded_prompt_tokens"), pa.float64()).to_numpy(zero_copy_only=False)
    )
    keep = ok & np.isfinite(measured) & np.isfinite(recorded)
    sources = results.column("source_request_id").to_pylist()
    kept = [sources[i] for i in np.flatnonzero(keep)]
    names = layouts_by_request(trace_batches, set(kept))
    layouts = [names.get(rid, "?") for rid in kept]
    report = length_errors(measured[keep], recorded[keep], layouts)
    source = (lengths or {}).get("source", "recorded")
    return {"source": source, "calibration": (lengths or {}).get("calibration"), **report}


def print_prompt_lengths(report: dict | None, console) -> None:
    """One line; in yellow, with the layouts off, when not every prompt is verified."""
    if not report or not report["requests"]:
        return
    tol = report["tolerance"]
    head = (
        f"prompt lengths ({report['source']}): {report['within_tolerance']} of {report['requests']} within "
        f"{tol:.0%} of the recorded length (error p50 {report['error_p50']:.1%}, p95 {report['error_p95']:.1%})"
    )
    off = report["unverified"]
    if not off["requests"]:
        console.print(head, soft_wrap=True, highlight=False)
        return
    worst = sorted(off["by_layout"].items(), key=lambda item: -item[1]["requests"])
    layouts = ", ".join(
        f"{name} {v['requests']} of {v['of']} (worst {v['error_max']:.1%})"
        for name, v in worst[:SHOWN_LAYOUTS]
    )
    more = f" and {len(worst) - SHOWN_LAYOUTS} more layouts" if len(worst) > SHOWN_LAYOUTS else ""
    word = "UNVERIFIED" if not report["verified"] else "unverified"
    console.print(
        f"[yellow]{escape(head)}; {word}: {off['requests']} requests beyond {tol:.0%}: {escape(layouts)}{more}[/]",
        soft_wrap=True,
        highlight=False,
    )

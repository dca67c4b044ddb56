"""capacity.json on the terminal (rich): the step table, the three points, headroom, bottleneck, cost,
and the one-line verdict. Printing only: every number comes from the document."""

from __future__ import annotations

from rich.table import Table


def _num(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _slo_cell(step: dict) -> str:
    return (
        ", ".join(f"{s['slo']} {_num(s['ci_high_ms'], '.1f')}ms {s['verdict']}" for s in step["slos"]) or "-"
    )


def step_table(document: dict) -> Table:
    table = Table(title="capacity steps", show_lines=False)
    for name in (
        "#",
        "kind",
        "factor",
        "offered req/s",
        "achieved req/s",
        "goodput",
        "TTFT p95 ms",
        "TPOT p95 ms",
        "SLOs (upper bound)",
        "errors",
        "lag p99 ms",
        "verdict",
    ):
        table.add_column(
            name, justify="left" if name in ("kind", "SLOs (upper bound)", "verdict") else "right"
        )
    for step in document["steps"]:
        share = step["goodput"]["share"]
        table.add_row(
            str(step["index"]),
            step["kind"],
            f"x{step['factor']:g}",
            _num(step["offered"]["requests_per_s"]),
            _num(step["achieved"]["requests_per_s"]),
            "-" if share is None else f"{share:.0%}",
            _num(step["latency"]["ttft"]["p95"]["value_ms"], ".1f"),
            _num(step["latency"]["tpot"]["p95"]["value_ms"], ".1f"),
            _slo_cell(step),
            "-" if step["errors"]["rate"] is None else f"{step['errors']['rate']:.1%}",
            _num(step["dispatch_lag_p99_ms"]),
            step["verdict"],
        )
    return table


def point_lines(document: dict) -> list[str]:
    lines = []
    knee = document.get("knee")
    if knee is None:
        lines.append("knee: no step measured the server")
    elif knee["reached"]:
        lo, hi = knee["bracket"]
        lines.append(
            f"knee: x{_num(knee['factor'], '.3g')} ({_num(knee['requests_per_s'])} req/s, "
            f"{_num(knee['output_tokens_per_s'], '.0f')} output tok/s), between x{_num(lo, 'g')} and x{hi:g}"
        )
    else:
        lines.append(f"knee: {knee['note']}")
    limit = document.get("slo_limit")
    if limit is None:
        lines.append("SLO limit: no step held every SLO")
    else:
        state = "confirmed by a sustain step" if limit["confirmed"] else "not confirmed"
        lines.append(
            f"SLO limit: x{limit['factor']:g} ({limit['offered_requests_per_s']:.2f} req/s offered, {state})"
        )
    point = document.get("operating_point")
    if point is not None:
        lines.append(
            f"operating point: x{point['factor']:.3g} ({point['headroom_target']:.0%} of the SLO limit, "
            f"{point['offered_requests_per_s']:.2f} req/s)"
        )
    room = document.get("headroom")
    lines.append(f"headroom: {room['text']}" if room else "headroom: unknown (no SLO limit)")
    bottleneck = document["bottleneck"]
    lines.append(f"bottleneck: {bottleneck['kind']} ({bottleneck['reason']})")
    cost = document.get("cost")
    if cost is not None:
        lines.append(
            f"cost at the operating point: {_num(cost['per_million_output_tokens'])} per million output tokens, "
            f"{_num(cost['per_request'], '.5f')} per request ({cost['note']})"
        )
    colds = [s["cold_start"] for s in document["steps"] if s["cold_start"]["requests"]]
    if colds:
        p50s = [c["ttft_p50_ms"] for c in colds if c["ttft_p50_ms"] is not None]
        lines.append(
            f"cold start (each step's warm-up, in no verdict): {colds[0]['requests']} requests at step 0, "
            f"TTFT p50 {_num(min(p50s) if p50s else None, '.1f')}-{_num(max(p50s) if p50s else None, '.1f')} ms"
        )
    bound = document.get("client_bound")
    if bound is not None:
        lines.append(
            f"client-bound at step {bound['step']} (x{bound['factor']:g}): {bound['reason']}; {bound['advice']}"
        )
    lines.append(f"stopped: {document['stop_reason']}")
    return lines


def print_capacity(document: dict, console) -> None:
    console.print(step_table(document))
    for line in point_lines(document):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    print_verdict(document, console)


def print_verdict(document: dict, console) -> None:
    verdict = document["verdict"]
    word = "PASS" if verdict["passed"] else "FAIL"
    console.print(f"{word}: {verdict['line']}", markup=False, highlight=False, soft_wrap=True)


def progress_line(step: dict) -> str:
    """One finished step: factor, offered/achieved req/s, goodput, SLO verdicts, elapsed."""
    slos = " ".join(f"{s['slo']}:{s['verdict']}" for s in step["slos"]) or "no SLO"
    share = step["goodput"]["share"]
    return (
        f"step {step['index']} {step['kind']} x{step['factor']:g}: offered {step['offered']['requests_per_s']:.2f} "
        f"achieved {step['achieved']['requests_per_s']:.2f} req/s, goodput {step['goodput']['served_per_s']:.2f} "
        f"req/s ({'-' if share is None else f'{share:.0%}'}), {slos}, {step['verdict']}"
        f"{'' if step['kept_up'] else ' (did not keep up)'}, {step['elapsed_s']:.1f}s"
        f"{' reused' if step['reused'] else ''}"
    )

"""The terminal's per-step progress line and the cold-start line, from hand-made capacity.json rows."""

from replayer.capacity.terminal import point_lines, progress_line


def row(index, factor, kept_up=True, cold=5, p50=11.0):
    return {
        "index": index,
        "kind": "search",
        "factor": factor,
        "offered": {"requests_per_s": 10.0 * factor},
        "achieved": {"requests_per_s": 9.8 * factor},
        "goodput": {"served_per_s": 9.8 * factor, "share": 1.0},
        "slos": [{"slo": "tpot_p50<=13ms", "verdict": "pass"}],
        "verdict": "pass" if kept_up else "fail",
        "kept_up": kept_up,
        "elapsed_s": 6.9,
        "reused": False,
        "cold_start": {"requests": cold, "ttft_p50_ms": p50 if cold else None, "ttft_p95_ms": None},
    }


def test_a_progress_line_names_factor_rates_goodput_slos_and_elapsed():
    assert progress_line(row(0, 1)) == (
        "step 0 search x1: offered 10.00 achieved 9.80 req/s, goodput 9.80 req/s (100%), "
        "tpot_p50<=13ms:pass, pass, 6.9s"
    )
    assert "(did not keep up)" in progress_line(row(1, 2, kept_up=False))


def test_cold_start_is_its_own_line_when_steps_warmed_up():
    document = {
        "steps": [row(0, 1, p50=9.0), row(1, 2, p50=14.5)],
        "knee": None,
        "slo_limit": None,
        "headroom": None,
        "bottleneck": {"kind": "unknown", "reason": "none scraped"},
        "stop_reason": "converged",
    }
    assert "cold start (each step's warm-up, in no verdict): 5 requests at step 0, TTFT p50 9.0-14.5 ms" in (
        point_lines(document)
    )
    document["steps"] = [row(0, 1, cold=0)]
    assert not any(line.startswith("cold start") for line in point_lines(document))

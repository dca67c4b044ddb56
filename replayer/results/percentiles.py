"""Exact percentiles of more values than a run should hold (every inter-chunk gap), read in passes;
the result is np.percentile's to the last bit (tests compare them). Why and how:
docs/design/replay-memory.md#itl-percentiles-in-passes-replayerresultspercentilespy."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

BINS = 4096
COLLECT_LIMIT = 200_000  # values of one interval gathered in memory to pick the order statistic


def streamed_percentiles(
    passes: Callable[[], Iterator[np.ndarray]], qs: Sequence[float], scale: float = 1.0
) -> tuple[int, dict[str, float | None]]:
    """(count of finite values, {"p<q>": np.percentile(values / scale, q)}) without holding the values.

    `passes()` yields the values afresh each time it is called (e.g. batch by batch from a file)."""
    count, low, high = 0, np.inf, -np.inf
    for values in _finite(passes):
        count += len(values)
        low, high = min(low, values.min()), max(high, values.max())
    if count == 0:
        return 0, {f"p{q}": None for q in qs}
    quantiles = np.true_divide(np.asanyarray(qs), np.float64(100))
    virtual = (count - 1) * quantiles
    previous = np.floor(virtual).astype(np.intp)
    following = previous + 1
    above, below = virtual >= count - 1, virtual < 0
    previous[above], following[above] = count - 1, count - 1
    previous[below], following[below] = 0, 0
    ranks = sorted(set(previous.tolist()) | set(following.tolist()))
    found = _order_statistics(passes, ranks, low, high)
    a = np.array([found[r] for r in previous.tolist()]) / scale
    b = np.array([found[r] for r in following.tolist()]) / scale
    gamma = virtual - np.where(above, -1, previous)  # numpy keeps the clipped index -1 for gamma
    diff = b - a
    result = a + diff * gamma
    np.subtract(b, diff * (1 - gamma), out=result, where=gamma >= 0.5)
    return count, {f"p{q}": float(v) for q, v in zip(qs, result, strict=True)}


def _finite(passes: Callable[[], Iterator[np.ndarray]]) -> Iterator[np.ndarray]:
    for values in passes():
        values = np.asarray(values, dtype=float)
        finite = values[np.isfinite(values)]
        if len(finite):
            yield finite


def _order_statistics(passes, ranks: list[int], low: float, high: float) -> dict[int, float]:
    """The value of each 0-based rank in the sorted values, in a few passes."""
    # rank -> (lo, hi, values below lo); the rank's value lies in [lo, hi]
    open_ = {r: (low, high, 0) for r in ranks}
    found: dict[int, float] = {}
    counts_in: dict[int, int] = {r: -1 for r in ranks}  # values in [lo, hi] as of the last pass (-1: many)
    while open_:
        collect = {r for r in open_ if 0 <= counts_in[r] <= COLLECT_LIMIT}
        hists = {r: np.zeros(BINS, np.int64) for r in open_ if r not in collect}
        gathered: dict[int, list[np.ndarray]] = {r: [] for r in collect}
        extremes = {r: [np.inf, -np.inf] for r in open_}
        for values in _finite(passes):
            for r, (lo, hi, _) in open_.items():
                inside = values[(values >= lo) & (values <= hi)]
                if not len(inside):
                    continue
                extremes[r][0] = min(extremes[r][0], inside.min())
                extremes[r][1] = max(extremes[r][1], inside.max())
                if r in collect:
                    gathered[r].append(inside)
                else:
                    hists[r] += np.histogram(inside, BINS, (lo, hi))[0]
        for r in list(open_):
            lo, hi, before = open_[r]
            if extremes[r][0] == extremes[r][1]:  # one distinct value left
                found[r] = extremes[r][0]
            elif r in collect:
                found[r] = np.sort(np.concatenate(gathered[r]))[r - before]
            else:
                edges = np.histogram_bin_edges([], BINS, (lo, hi))
                cumulative = np.cumsum(hists[r])
                i = int(np.searchsorted(cumulative, r - before, side="right"))
                new_before = before + (int(cumulative[i - 1]) if i else 0)
                # np.histogram's bins are [e_i, e_i+1), the last one closed: the same as a closed interval
                # up to the float just below e_i+1, or up to hi
                upper = np.nextafter(edges[i + 1], -np.inf) if i + 1 < BINS else hi
                open_[r] = (edges[i], upper, new_before)
                counts_in[r] = int(hists[r][i])
                continue
            del open_[r]
    return found

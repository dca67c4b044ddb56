"""Event-loop lag: how late a 20 ms sleep wakes up. On a proxy that lag is added to every chunk in flight."""

from __future__ import annotations

import asyncio
import time

SAMPLE_INTERVAL_S = 0.02


class LagMonitor:
    """Samples loop lag in the background; `take_summary_ms` returns and resets the period's percentiles."""

    def __init__(self) -> None:
        self._lags_ns: list[int] = []
        self.max_samples = 50_000  # 1000 s of samples; older ones are dropped, memory stays flat

    async def run(self) -> None:
        interval_ns = int(SAMPLE_INTERVAL_S * 1e9)
        while True:
            start = time.perf_counter_ns()
            await asyncio.sleep(SAMPLE_INTERVAL_S)
            self._lags_ns.append(max(0, time.perf_counter_ns() - start - interval_ns))
            if len(self._lags_ns) > self.max_samples:
                del self._lags_ns[: len(self._lags_ns) // 2]

    def take_summary_ms(self) -> dict[str, float | None]:
        lags, self._lags_ns = self._lags_ns, []
        if not lags:
            return {"p50": None, "p99": None, "max": None}
        values = sorted(lag / 1e6 for lag in lags)
        return {
            "p50": round(percentile(values, 50), 3),
            "p99": round(percentile(values, 99), 3),
            "max": round(values[-1], 3),
        }


def percentile(ordered: list[float], q: float) -> float:
    """numpy's default (linear) percentile of sorted values, without numpy: the proxy must not load it."""
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

"""Event-loop lag: how late a 20 ms sleep wakes up. On a proxy that lag is added to every chunk in flight."""

from __future__ import annotations

import asyncio
import time

import numpy as np

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
        values = np.asarray(lags, dtype=float) / 1e6
        p50, p99 = np.percentile(values, [50, 99])
        return {
            "p50": round(float(p50), 3),
            "p99": round(float(p99), 3),
            "max": round(float(values.max()), 3),
        }

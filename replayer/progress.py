"""Live progress of a replay (coordinator side), read from the workers' shared counters."""

from __future__ import annotations

from replayer.loop.worker import STAT_SLOTS

_INDEX = {name: i for i, name in enumerate(STAT_SLOTS)}


def totals(stats) -> dict[str, int]:
    """Counters summed over workers; lag p99 is the worst worker's."""
    out = {name: sum(s[i] for s in stats) for name, i in _INDEX.items() if name != "lag_p99_ns"}
    out["lag_p99_ns"] = max((s[_INDEX["lag_p99_ns"]] for s in stats), default=0)
    return out


class Progress:
    def __init__(self, console, total: int, jobs):
        from rich.live import Live

        self.total = total
        self.span_s = max((j.plans[-1].scheduled_offset_ns for j in jobs if j.plans), default=0) / 1e9
        self._live = Live("", console=console, refresh_per_second=4, transient=False)
        self._live.start()

    def _line(self, stats, elapsed_s: float) -> str:
        t = totals(stats)
        return (
            f"sent {t['sent']}/{self.total}  done {t['done']}  errors {t['errors']}  shed {t['shed']}  "
            f"in flight {t['inflight']}  lag p99 {t['lag_p99_ns'] / 1e6:.2f} ms  "
            f"elapsed {max(0.0, elapsed_s):.1f} s of ~{self.span_s:.1f} s trace time"
        )

    def update(self, stats, elapsed_s: float) -> None:
        self._live.update(self._line(stats, elapsed_s))

    def close(self, stats, elapsed_s: float) -> None:
        self._live.update(self._line(stats, elapsed_s))
        self._live.stop()
        if not self._live.console.is_terminal:
            self._live.console.line()  # rich ends the line on terminals only: later lines start fresh

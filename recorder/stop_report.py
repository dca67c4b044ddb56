"""What the recorder says when it stops: counts in words, and whether everything it saw was filed.

The exit status follows `ok`: a stop that left captures unfiled, dropped or rejected is a failure.
"""

from __future__ import annotations

from dataclasses import dataclass

from recorder.dead_letter import REASONS, REJECTED_DIR
from recorder.spool import SPOOL_DIR


@dataclass(frozen=True, slots=True)
class StopReport:
    seen: int
    journaled: int
    dropped: int
    in_flight: int  # live at stop: recorded with error_kind shutdown
    passed_through: int
    converter_restarts: int
    filed: bool  # the converter filed the whole journal
    rows: int | None  # the last converter's counts, when it reported them
    rejected: int | None
    dropped_why: str | None = None

    @classmethod
    def of(cls, recorder, in_flight: int, filed: bool) -> StopReport:
        journal, converter = recorder.journal, recorder.converter
        stats = converter.final_stats
        return cls(
            seen=recorder.seen,
            journaled=journal.captures_written,
            dropped=journal.dropped,
            in_flight=in_flight,
            passed_through=recorder.passed_through,
            converter_restarts=converter.restarts,
            filed=filed,
            rows=stats.get("rows"),
            rejected=stats.get("rejected"),
            dropped_why=journal.last_impairment,
        )

    @property
    def ok(self) -> bool:
        return self.filed and not self.dropped and not self.rejected

    def __str__(self) -> str:
        parts = [f"{self.seen:,} LLM requests seen, {self.journaled:,} journaled"]
        if self.in_flight:
            parts.append(f"{self.in_flight:,} in flight at stop (recorded as shutdown)")
        parts.append(f"{self.passed_through:,} other requests passed through unrecorded")
        if self.converter_restarts:
            parts.append(f"converter restarted {self.converter_restarts} time(s)")
        text = "; ".join(parts) + ". "
        if self.filed:
            text += "Every journaled request is filed in Parquet."
        else:
            text += f"NOT ALL FILED: captures remain in {SPOOL_DIR}/; the next start on this directory files them."
        if self.dropped:
            text += f" {self.dropped:,} requests were NOT recorded ({self.dropped_why or 'journal impaired'})."
        if self.rejected:
            text += (
                f" {self.rejected:,} requests could not be converted: kept in"
                f" {SPOOL_DIR}/{REJECTED_DIR}/{REASONS} with the reason."
            )
        return text

"""A run or a trace read as measurements: its rows as a side, per-request columns, latency samples and
the cold start. `results/` (a run's own summary), `compare/` (two sides) and `capacity/` (each step) read
runs through it; it uses `judge/` for statistics and none of those three."""

"""Judging a run or a comparison: gate limits, the error gate, a run's fidelity, SLOs, the statistics of
a verdict and the verdict itself. `results/` (a run's own verdict), `compare/` (two sides) and `capacity/`
(each step) use it; it uses none of them."""

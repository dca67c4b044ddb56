"""Comparing two sides (a run, a recording): fidelity, paired latency tests, SLOs and the verdict."""

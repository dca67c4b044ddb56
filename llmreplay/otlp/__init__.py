"""OTLP/HTTP export of a finished run: GenAI-semconv metrics and one span per request (off by default).

Nothing here runs during a replay's timed loop: `replay`/`capacity` call it after the run is written.
"""

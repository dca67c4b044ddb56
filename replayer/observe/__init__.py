"""A running replay's live progress at --metrics-port (Prometheus text format). Coordinator side only:
nothing here runs in, or is imported by, the workers' loop. After the run: llmreplay.prometheus."""

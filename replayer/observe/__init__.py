"""Prometheus out: a run's live progress at --metrics-port, a finished run pushed to a Pushgateway or by
remote-write. Coordinator side only: nothing here runs in, or is imported by, the workers' loop."""

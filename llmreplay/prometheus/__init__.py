"""Prometheus out for every stage: the run labels, a finished run's figures, the Pushgateway and
remote-write senders, and the flags (`replay`, `capacity`, `export prometheus`). The live endpoint of a
running replay is the replayer's (replayer.observe.live)."""

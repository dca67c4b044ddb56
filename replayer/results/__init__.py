"""A run's results after the clock: merged rows, percentiles, server metrics and the summary."""

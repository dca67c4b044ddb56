"""`llmreplay anonymize`: content out, shape kept (exact token lengths, real prefix sharing, no leaks).

Imports the core (llmreplay) only; never the recorder or the replayer.
"""

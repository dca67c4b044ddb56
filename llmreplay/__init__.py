"""llmreplay core: the trace format and its I/O, tokenizers, public-trace import/export and the CLI.

Stages (recorder, anonymizer, replayer) import this package; it never imports them at module level.
"""

__version__ = "0.1.0"

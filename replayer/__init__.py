"""The replayer: open-loop, session-aware replay of a trace against an OpenAI-compatible engine.

Imports the core (`llmreplay`) only; never the recorder or the anonymizer.
"""

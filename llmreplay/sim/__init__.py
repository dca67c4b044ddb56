"""`llmreplay sim`: a simulated OpenAI-compatible engine with a continuous-batching queueing model.

It is a real aiohttp server that knows the ground truth of what it received and when.
It imports only the core (`llmreplay.*`), never a stage (recorder, anonymizer, replayer).
"""

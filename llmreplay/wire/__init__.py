"""The wire rules of every API llmreplay reads and writes (OpenAI's chat, completions, embeddings and
Responses; Anthropic's Messages): endpoints, token channels, usage, error objects, counted text.

The recorder's proxy and the replayer's loop import it: no pyarrow, numpy or tokenizer here.
"""

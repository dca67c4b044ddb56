"""The OpenAI wire rules every stage reads: endpoints, token channels, usage, error objects, counted text.

The recorder's proxy and the replayer's loop import it: no pyarrow, numpy or tokenizer here.
"""

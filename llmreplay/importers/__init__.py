"""Public LLM serving traces (Mooncake, Azure, BurstGPT, RAGPulse) in, as shape traces.

One reader module per source; `assemble` and `pipeline` are shared. Imports only the core.
"""

"""The worker process: sends planned requests on time and stamps answers. It imports neither pyarrow,
numpy nor a tokenizer (tests/test_package_boundaries.py holds it to that)."""

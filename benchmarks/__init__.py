"""Benchmarks: runnable as `python -m benchmarks.<name>`; each module's run() returns a dict."""

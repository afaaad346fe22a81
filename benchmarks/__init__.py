"""Benchmarks: one module per study, each one `suite.Benchmark` record; `python -m benchmarks
--only NAME` runs one (`benchmarks.__main__`)."""

"""The off-site stage: reads only a verified release artifact (plus public models and a seed).

It never imports ``release``; tests/test_import_boundaries.py enforces that.
"""

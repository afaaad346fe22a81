"""The enclave stage: the only code that reads private rows.

Everything it emits is a DP output (an OpenDP measurement) or post-processing of DP outputs.
"""

"""Audits: membership inference, mechanism epsilon, fidelity and utility.

Audits run where the private rows are and may read them; they never write into an artifact.
"""

"""The audits in Python (inside the enclave, where the real rows are): `audit_report` is
``selpe-audit audit report`` and `audit_mechanism` is ``selpe-audit audit mechanism`` as
functions; the commands are thin layers over them."""

from audits.mechanism_kind import audit_mechanism
from audits.report import Report, audit_report

__all__ = ["Report", "audit_mechanism", "audit_report"]

"""The shape issues 61 and 69 gave the code holds: no module over 600 lines, no private name
across modules, OpenDP and private-pgm imported only behind their adapter (`code_rules`
measures it; ruff checks each function's complexity and arguments)."""

from __future__ import annotations

from code_rules import MAX_MODULE, ROOT, shape


def test_the_code_keeps_its_shape():
    now = shape(ROOT)
    assert now["modules_over_max"] == [], f"modules over {MAX_MODULE} lines"
    assert now["private_imports"] == []
    # the one named exception of the import-linter contracts: decode refits with OpenDP's
    # mirror descent and private-pgm and may not import release (the air gap): its shim
    assert now["opendp_outside_dp"] == ["decode.decoders.pgm"]
    assert now["mbi_outside_dp"] == ["decode.decoders.pgm"]

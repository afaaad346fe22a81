"""The shape issue 61 gave the code holds: short functions in the stages, no module over 500
lines, OpenDP imported only behind its adapter (`benchmarks.code_shape` measures it)."""

from __future__ import annotations

from benchmarks.code_shape import MAX_FUNCTION, MAX_MODULE, ROOT, shape


def test_the_code_keeps_its_shape():
    now = shape(ROOT)
    assert now["functions_over_max"] == [], f"functions over {MAX_FUNCTION} lines"
    assert now["modules_over_max"] == [], f"modules over {MAX_MODULE} lines"
    assert now["private_imports"] == []
    # the one named exception of the import-linter contract: decode refits with OpenDP's
    # mirror descent and may not import release (the air gap)
    assert now["opendp_outside_dp"] == ["decode.decoders.mrf"]
    assert now["release_function_lines"] <= MAX_FUNCTION

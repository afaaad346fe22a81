"""The shape issues 61 and 69 gave the code holds: no module over 600 lines, no private name
across modules, OpenDP and private-pgm imported only behind their adapter, records between
the release's stages (`code_rules` measures it; ruff checks each function's complexity and
arguments)."""

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
    # stages hand each other records; what stays JSON is what a plugin or a component
    # writes about itself: a counts mode's block, a selection mode's settings, the kernel's
    # and the candidate source's descriptions
    assert now["stage_dict_payloads"] == [
        "release.stages.counts.CountsPart.json",
        "release.stages.selection.SelectionPart.candidates",
        "release.stages.selection.SelectionPart.kernel",
        "release.stages.selection.SelectionPart.settings"]

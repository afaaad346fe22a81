"""The README a newcomer reads: short, numbers in RESULTS.md only, every link alive."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_is_short_and_carries_no_measured_number():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    # measured numbers (AUCs, gaps, ratios, rates) live in benchmarks/RESULTS.md alone
    assert not re.findall(r"\b0\.\d{2,}\b|\d+(?:\.\d+)?x\b|\d+(?:\.\d+)? ?records/s", text)
    assert "RESULTS.md" in text
    assert "../shared" not in text


def test_every_relative_link_in_the_docs_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "#", "mailto:")):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_each_role_has_a_guide_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    for guide in ("release", "selection", "review", "decode", "audits", "design",
                  "architecture", "deployment", "benchmarks", "install"):
        assert f"docs/{guide}.md" in readme and (ROOT / "docs" / f"{guide}.md").exists()

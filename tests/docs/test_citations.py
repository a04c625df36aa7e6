"""The code cites the model's description as `spec §N` (docs/design/k3-spec.md) and `vision spec §N`
(docs/design/k3-vision-spec.md): every citation must name a section those pages have."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"spec": ROOT / "docs/design/k3-spec.md", "vision spec": ROOT / "docs/design/k3-vision-spec.md"}
CITATION = re.compile(r"(vision spec|spec) §(\d+(?:\.\d+)?)")


def _sections(page: Path) -> set[str]:
    """'4', '4.2', ... from headings such as `## 4. Forward pass` and `### 4.2 Decoder-layer skeleton`."""
    return {m.group(1).rstrip(".") for m in re.finditer(r"^#{2,3} (\d+(?:\.\d+)?)\.?\s", page.read_text(), re.M)}


def test_every_citation_names_a_section_of_a_page_in_the_repository():
    sections = {name: _sections(page) for name, page in PAGES.items()}
    assert {"4.2", "6.1", "8"} <= sections["spec"] and {"3.1", "7.2"} <= sections["vision spec"]
    bad, seen = [], 0
    for folder in ("src", "tests", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            for m in CITATION.finditer(path.read_text()):
                seen += 1
                if m.group(2) not in sections[m.group(1)]:
                    bad.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert seen > 20 and not bad, bad


def test_no_citation_of_a_document_outside_the_repository():
    stale = [str(p.relative_to(ROOT)) for folder in ("src", "tests", "benchmarks") for p in (ROOT / folder).rglob("*.py")
             if re.search(r"K3_(?:SPEC|VISION)\.md|spec section \d", p.read_text())]
    assert not stale, stale

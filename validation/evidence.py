"""The docs' Evidence sections are the published results' tables: each doc holds
`<!-- evidence: NAME -->` … `<!-- /evidence -->` blocks whose text is validation/results/NAME.md.
`python -m validation docs` rewrites the blocks from the results; `--check` only compares."""

from __future__ import annotations

import re
from pathlib import Path

from validation.harness import RESULTS, ROOT

DOCS = ROOT / "docs"
BLOCK = re.compile(r"(<!-- evidence: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /evidence -->)",
                   re.S)


def blocks(text: str) -> list[tuple[str, str]]:
    """(name, body) of every evidence block in a doc's text."""
    return [(m["name"], m["body"]) for m in BLOCK.finditer(text)]


def filled(text: str, results: Path = RESULTS) -> str:
    """`text` with every block's body replaced by its published table (a missing result
    leaves the block as it is)."""
    def one(m: re.Match[str]) -> str:
        md = results / f"{m['name']}.md"
        if not md.is_file():
            return m[0]
        body = md.read_text().strip("\n") + "\n"
        return f"{m[1]}{body}{m[4]}"
    return BLOCK.sub(one, text)


def stale(docs: Path = DOCS, results: Path = RESULTS) -> list[str]:
    """`doc: NAME` for every block whose body differs from its published table, or whose
    result is missing."""
    out = []
    for doc in sorted(docs.glob("*.md")):
        text = doc.read_text()
        for name, body in blocks(text):
            md = results / f"{name}.md"
            if not md.is_file():
                out.append(f"{doc.name}: {name} (no validation/results/{name}.md)")
            elif body.strip("\n") != md.read_text().strip("\n"):
                out.append(f"{doc.name}: {name}")
    return out


def sync(docs: Path = DOCS, results: Path = RESULTS) -> list[Path]:
    changed = []
    for doc in sorted(docs.glob("*.md")):
        text = doc.read_text()
        new = filled(text, results)
        if new != text:
            doc.write_text(new)
            changed.append(doc)
    return changed

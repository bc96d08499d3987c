"""docs/ is the user's manual: no commit hashes, no issue numbers, no dates outside the
evidence, no machine folders; each Evidence block is the published validation result."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from validation import evidence

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))

# Pages whose owners are rewriting them to these rules: each is checked once it leaves this
# list. (The test below fails when a listed page already passes, so the list cannot go stale.)
PENDING: set[str] = set()

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"`[^`\n]*(?:\n[^`\n]*)?`")  # one line break at most
EVIDENCE = re.compile(r"<!-- evidence: [a-z0-9-]+ -->.*?<!-- /evidence -->", re.S)
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# a commit named as history; a source pinned at its version (`vms.csv @ 006059e0`) is a citation
HASH = re.compile(r"(?<!@ )(?<!@)\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")
ISSUE = re.compile(r"(?<![\w&])#\d+\b|\bissues? \d+\b|\bissue [`'\"]", re.I)
MACHINE = re.compile(r"/work/|/tmp/|/opt/torch|/root\b|\$OUT\b|\.peers\b|\.whl\b")
HISTORY = re.compile(r"\b(this|next|last|previous|second|third|fourth|fifth|sixth) session\b|"
                     r"\bdevelopment (VM|machine)\b|\bdevice-runs\b", re.I)


# a link's target: a source cited at a pinned commit (its URL holds the commit and dated file
# names) is a citation, not history
LINK = re.compile(r"\]\([^)\s]+\)")


def prose(text: str) -> str:
    """The text a reader reads as prose: code blocks, inline code and links' targets taken
    out."""
    return LINK.sub("]", INLINE.sub("", FENCE.sub("", text)))


def problems(text: str) -> list[str]:
    out = []
    outside = EVIDENCE.sub("", text)
    for line in prose(outside).splitlines():
        for what, pattern in (("date", DATE), ("issue number", ISSUE),
                              ("session or development-machine talk", HISTORY)):
            if pattern.search(line):
                out.append(f"{what}: {line.strip()[:100]}")
    for line in LINK.sub("]", FENCE.sub("", text)).splitlines():  # in inline code too
        for what, pattern in (("commit hash", HASH), ("machine path", MACHINE)):
            if pattern.search(line):
                out.append(f"{what}: {line.strip()[:100]}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_a_doc_has_no_history_hashes_issue_numbers_or_machine_paths(doc):
    found = problems(doc.read_text())
    if doc.name in PENDING:
        assert found, f"{doc.name} passes now: take it off PENDING"
        pytest.skip(f"{doc.name}: its owner is rewriting it ({len(found)} lines to go)")
    assert not found, f"{doc.name}:\n" + "\n".join(found)


def test_the_checks_catch_what_they_are_for():
    bad = ("Since ecf089f the search is faster.\n"
           "Measured 2026-12-01 in the second session on the development VM.\n"
           "See issue 14 and #19.\n"
           "The log is in /work/main/docs and /tmp/x, carried as .whl.\n")
    kinds = {p.split(":")[0] for p in problems(bad)}
    assert kinds == {"commit hash", "date", "session or development-machine talk",
                     "issue number", "machine path"}
    fine = ("Ranks 0-3, 1,048,576 bytes, `--since 2025-03-01`, sm_90, a0 and e4m3.\n"
            "```\nrun 7e8cc0d61d72 started 2026-11-30\n```\n"
            "<!-- evidence: x -->\nMeasured 2026-12-01.\n<!-- /evidence -->\n")
    assert problems(fine) == []


def test_every_evidence_block_is_its_published_result():
    assert evidence.stale() == [], "run: python -m validation docs"
    names = {name for doc in DOCS for name, _ in evidence.blocks(doc.read_text())}
    assert {"feed", "bench-fidelity", "doctor-zoo", "workloads", "inspect", "fleet-scale",
            "monitor-soak", "nvml-probe", "monitor-cost", "predict", "predict-zoo",
            "predict-mlperf", "render-science"} <= names


def test_no_doc_links_to_a_file_that_is_not_there():
    link = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")
    missing = []
    for doc in DOCS:
        for target, _ in link.findall(prose(doc.read_text())):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (doc.parent / target).exists():
                missing.append(f"{doc.name}: {target}")
    assert missing == []

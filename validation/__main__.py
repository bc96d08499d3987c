"""python -m validation list | run NAME --out DIR [--mode M] [--dry] [--peers DIR] [-- ARGS]
| publish DIR [NAME...] | show NAME | docs [--check]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from validation import evidence
from validation.capabilities import CAPABILITIES
from validation.harness import RESULTS, publish, run_capability


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m validation",
                                 description="gpuaudit's validation harness")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the capabilities, what each validates and against what")
    run = sub.add_parser("run", help="run one capability; writes DIR/NAME.json and DIR/NAME.md",
                         epilog="The entry's own options follow `--`.")
    run.add_argument("name", choices=sorted(CAPABILITIES))
    run.add_argument("--out", type=Path, required=True, help="folder for the result and raw files")
    run.add_argument("--mode", help="a part of the capability (see `list`)")
    run.add_argument("--dry", action="store_true", help="without a GPU: the CPU part")
    run.add_argument("--peers", type=Path,
                     help="the reference tools' sources (nccl-tests/, mamf-finder.py, fio/)")
    pub = sub.add_parser("publish", help="copy DIR's results into validation/results/")
    pub.add_argument("out", type=Path)
    pub.add_argument("names", nargs="*")
    show = sub.add_parser("show", help="print the latest published table of NAME")
    show.add_argument("name", choices=sorted(CAPABILITIES))
    docs = sub.add_parser("docs", help="rewrite the docs' evidence blocks from the results")
    docs.add_argument("--check", action="store_true", help="only list the stale blocks (exit 1)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:  # the entry's own options, passed on as typed
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    a = parser().parse_args(argv)
    if a.cmd == "list":
        for c in CAPABILITIES.values():
            needs = "GPU" if c.gpu else "CPU"
            extra = f"; modes {', '.join(c.modes)}" if c.modes else ""
            dry = ", --dry" if c.dry and c.gpu else ""
            print(f"{c.name:17} {c.what} (beside: {c.reference}; {needs}{dry}{extra}; "
                  f"docs/{c.docs})")
        return 0
    if a.cmd == "show":
        md = RESULTS / f"{a.name}.md"
        if not md.is_file():
            print(f"no published result for {a.name}", file=sys.stderr)
            return 2
        print(md.read_text(), end="")
        return 0
    if a.cmd == "docs":
        if a.check:
            problems = evidence.stale()
            for line in problems:
                print(f"stale evidence: {line}", file=sys.stderr)
            return 1 if problems else 0
        for doc in evidence.sync():
            print(f"rewrote {doc.relative_to(doc.parents[1])}")
        return 0
    if a.cmd == "publish":
        names = a.names or sorted(CAPABILITIES)
        unknown = [n for n in names if n not in CAPABILITIES]
        if unknown:
            print(f"unknown capability: {', '.join(unknown)}", file=sys.stderr)
            return 2
        done = publish(a.out, names)
        for path in done:
            print(f"published {path.name}")
        return 0 if done else 2
    cap = CAPABILITIES[a.name]
    if a.mode and a.mode not in cap.modes:
        print(f"{cap.name} has no mode {a.mode!r} (modes: {', '.join(cap.modes) or 'none'})",
              file=sys.stderr)
        return 2
    if a.dry and not cap.dry:
        print(f"{cap.name} has no dry run: it needs a GPU", file=sys.stderr)
        return 2
    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
    result = run_capability(cap, a.out, dry=a.dry, peers=a.peers, mode=a.mode, args=extra,
                            log=log)
    print(result.table_md, end="")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())

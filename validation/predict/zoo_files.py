"""A zoo recording's files: packed into tars for the way back from the device machine, its
kernel views read again from the traces it kept, and its compared results merged into the
published ones, the recording kept beside them so that they can be compared again after a
change of the method (`zoo.py pack`, `zoo.py reparse`, `zoo.py merge`)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def reparse(out: Path) -> int:
    """Every recording's kernel view read again from its kept trace (after a change of the
    trace's reading: classes, timeline, host waits), the counted work kept."""
    import gzip

    from gpuaudit.model import load_run
    from gpuaudit.workloads.kernelview import parse_trace
    from gpuaudit.workloads.opcapture import with_kernel_view

    for run_file in sorted((out / "runs").glob("*.json")):
        run = load_run(run_file.read_text())
        profiles = []
        for p in run.op_profiles:
            entry = str(p.model_params.get("entry") or p.model)
            trace = out / "traces" / run_file.stem / (
                re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{entry}-{p.mode}") + ".json.gz")
            if not trace.exists():
                profiles.append(p)
                continue
            with gzip.open(trace, "rt") as f:
                events = json.load(f)["traceEvents"]
            profiles.append(with_kernel_view(p, parse_trace(events, p.profiled_steps)))
        run_file.write_text(run.model_copy(update={"op_profiles": tuple(profiles)})
                            .model_dump_json())
        print(f"reparsed {run_file.name}: {len(profiles)} profiles")
    return 0


def pack(out: Path, dest: Path, limit: int = 15 * 2**20, most: int = 7) -> int:
    """OUTDIR's files into at most `most` tars of at most `limit` bytes each in `dest` (the
    device machine sends back 8 files of 16 MiB): results first, traces after."""
    import tarfile

    files = [p for p in sorted(out.rglob("*")) if p.is_file()]
    files.sort(key=lambda p: (p.parts[len(out.parts)] == "traces", str(p)))
    bins: list[list[Path]] = [[]]
    size = 0
    for f in files:
        n = f.stat().st_size
        if bins[-1] and size + n > limit:
            bins.append([])
            size = 0
        bins[-1].append(f)
        size += n
    dest.mkdir(parents=True, exist_ok=True)
    for i, group in enumerate(bins[:most]):
        with tarfile.open(dest / f"zoo-{i}.tar", "w") as tar:
            for f in group:
                tar.add(f, arcname=str(f.relative_to(out.parent)))
    if len(bins) > most:
        print(f"pack: {sum(len(b) for b in bins[most:])} files left out (over {most} tars)")
    return 0


def merge(published: Path, results: Path, label: str) -> int:
    """A compare's results (OUTDIR/results.json, its folder named `label`, "forty-sixth")
    into the published results (tests/fixtures/predict/zoo-results.json): its rows and timing
    controls as that recording's, its rates under its name; an earlier merge of the same
    label is replaced. What each recording was (`about`, `about_current`) is written by hand."""
    from validation.predict.zoo_tables import RECORDER

    if label not in RECORDER:
        print(f"merge: {label!r} is not a recording's name (first … ninety-ninth)",
              file=sys.stderr)
        return 2
    doc = json.loads(published.read_text())
    new = json.loads(results.read_text())
    elsewhere = sorted({str(r["recording"]) for r in new["rows"] + new["controls"]
                        if r.get("recording") not in (None, label)})
    if elsewhere:  # compare names a row by its recording folder's parent
        print(f"merge: {results} holds rows of {', '.join(elsewhere)}, not only {label}",
              file=sys.stderr)
        return 2
    for part in ("rows", "controls"):
        # where the label's earlier rows stood, else after the others
        at = next((i for i, r in enumerate(doc[part]) if r.get("recording") == label),
                  len(doc[part]))
        kept = [r for r in doc[part] if r.get("recording") != label]
        doc[part] = kept[:at] + [{**r, "recording": label} for r in new[part]] + kept[at:]
    doc["rates"][label] = new["rates"]
    published.write_text(json.dumps(doc, indent=1))
    print(f"merge: {len(new['rows'])} rows and {len(new['controls'])} controls of the "
          f"{RECORDER[label]} recording into {published}")
    if (results.parent / "runs").is_dir():
        kept = keep(results.parent, kept_recording(published, label))
        print(f"merge: the recording kept in {kept}")
    return 0


# what `compare` reads of a recording: the traces stay out (a recording's runs, cases and
# rates come to 150-200 kB packed; its traces to megabytes)
KEPT = ("runs", "status", "cases", "rates.json", "status.json")
# a path into the repository on the recording machine ("/…/validation/predict/zoo.py")
_IN_REPOSITORY = re.compile(r'"/[^"]*?/((?:src|validation|examples|tests)/[^"]*)"')


def kept_recording(published: Path, label: str) -> Path:
    """Where a published file's recording `label` is kept ("…/recordings/zoo-results-h100/
    fourteenth.tar.gz")."""
    return published.parent / "recordings" / published.stem / f"{label}.tar.gz"


def keep(zoo: Path, dest: Path) -> Path:
    """A recording's folder (OUTDIR/zoo) packed without its traces into `dest`, as
    LABEL/zoo/…, so that `compare` on it unpacked names its rows LABEL again. A run records
    the command that made it, with the recording machine's path to this repository: kept,
    that path is the repository's own (`validation/predict/zoo.py`), as on a user's machine."""
    import gzip
    import io
    import tarfile

    label = dest.name.removesuffix(".tar.gz")
    dest.parent.mkdir(parents=True, exist_ok=True)
    files = [f for name in KEPT if (zoo / name).exists()
             for f in ([zoo / name] if (zoo / name).is_file()
                       else sorted((zoo / name).rglob("*")))]
    # no time in the archive: the same recording kept again is the same file
    with gzip.GzipFile(dest, "wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for f in files:
            if not f.is_file():
                continue
            data = _IN_REPOSITORY.sub(r'"\1"', f.read_text()).encode()
            info = tarfile.TarInfo(f"{label}/zoo/{f.relative_to(zoo)}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return dest

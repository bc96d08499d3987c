"""The published zoo results are what `predict` gives now: every recording kept beside them
(`zoo.py merge` keeps each one it merges) is compared again here, and its rows must come out
as published, field for field. A change of the method that moves a published figure fails
here until the recordings are compared again and the figures published anew."""

from __future__ import annotations

import functools
import json
import tarfile
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[1]
PREDICT = FIXTURES / "predict"
KEPT = sorted((PREDICT / "recordings").glob("*/*.tar.gz"))


def test_recordings_are_kept_for_each_published_file_that_has_them():
    assert {p.parent.name for p in KEPT} <= {"zoo-results", "zoo-results-h100"}
    assert {p.name for p in KEPT if p.parent.name == "zoo-results-h100"} >= \
        {"thirteenth.tar.gz", "fourteenth.tar.gz", "fifteenth.tar.gz", "sixteenth.tar.gz",
         "seventeenth.tar.gz", "eighteenth.tar.gz", "nineteenth.tar.gz", "twentieth.tar.gz",
         "twenty-first.tar.gz", "twenty-second.tar.gz", "twenty-third.tar.gz",
         "twenty-fourth.tar.gz", "twenty-fifth.tar.gz", "twenty-sixth.tar.gz",
         "twenty-seventh.tar.gz", "twenty-eighth.tar.gz"}


@pytest.fixture(scope="module")
def counted_once():
    """A size change counts its source and its target (`predict.stepcount`), the same ones
    in each recording of a family (the MoE's four, counted on the CPU): counted once here."""
    from gpuaudit.predict import retarget

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(retarget, "count", functools.cache(retarget.count))
        yield


@pytest.mark.parametrize("kept", KEPT, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_kept_recording_compares_to_its_published_rows(kept, tmp_path, monkeypatch, capsys,
                                                         counted_once):
    from validation.predict.zoo import compare

    monkeypatch.syspath_prepend(str(ROOT / "examples" / "predict"))  # the size entries
    label = kept.name.removesuffix(".tar.gz")
    with tarfile.open(kept) as tar:
        tar.extractall(tmp_path, filter="data")
    assert compare([tmp_path / label / "zoo"], None) == 0
    capsys.readouterr()
    got = json.loads((tmp_path / label / "zoo" / "results.json").read_text())
    published = json.loads((PREDICT / f"{kept.parent.name}.json").read_text())
    mine = [r for r in published["rows"] if r.get("recording") == label]
    assert any("predicted" in r for r in mine)
    assert [{**r, "recording": label} for r in got["rows"]] == mine
    assert got["rates"] == published["rates"][label]


def test_merge_keeps_the_recording_without_its_traces_and_with_the_repositorys_paths(tmp_path):
    """A run names the command that made it with the recording machine's folders; kept, it
    names the repository's own paths, and the traces stay behind."""
    from validation.predict.zoo_files import kept_recording, merge

    published = tmp_path / "zoo-results-h100.json"
    doc = json.loads((PREDICT / "zoo-results-h100.json").read_text())
    published.write_text(json.dumps(doc))
    zoo = tmp_path / "fourteenth" / "zoo"
    for sub in ("runs", "status", "traces"):
        (zoo / sub).mkdir(parents=True)
    (zoo / "runs" / "vae.json").write_text(json.dumps(
        {"command": ["/somewhere/checkout/validation/predict/zoo.py", "worker"]}))
    (zoo / "status" / "vae.json").write_text("{}")
    (zoo / "traces" / "big.json.gz").write_bytes(b"x" * 1000)
    (zoo / "rates.json").write_text(json.dumps({"command": ["/x/y/src/gpuaudit/__main__.py"]}))
    rows = [r for r in doc["rows"] if r.get("recording") == "fourteenth"]
    (zoo / "results.json").write_text(json.dumps(
        {"rates": doc["rates"]["fourteenth"], "rows": rows, "controls": []}))
    assert merge(published, zoo / "results.json", "fourteenth") == 0
    kept = kept_recording(published, "fourteenth")
    assert kept == tmp_path / "recordings" / "zoo-results-h100" / "fourteenth.tar.gz"
    with tarfile.open(kept) as tar:
        names = sorted(tar.getnames())
        run = json.loads(tar.extractfile("fourteenth/zoo/runs/vae.json").read())  # type: ignore[union-attr]
        rates = json.loads(tar.extractfile("fourteenth/zoo/rates.json").read())  # type: ignore[union-attr]
    assert names == ["fourteenth/zoo/rates.json", "fourteenth/zoo/runs/vae.json",
                     "fourteenth/zoo/status/vae.json"]
    assert run["command"] == ["validation/predict/zoo.py", "worker"]
    assert rates["command"] == ["src/gpuaudit/__main__.py"]


@pytest.mark.parametrize(("label", "family", "without"), [
    ("twenty-sixth", "convolutional VAE", -12.3),
    ("twenty-eighth", "WaveNet", 4.0),
])
def test_a_size_step_by_its_width_timings_and_without_them(label, family, without, tmp_path,
                                                           monkeypatch, capsys, counted_once):
    """docs/predict.md: a kept recording with its convolutions timed at twice their channels,
    its size step compared again with those timings taken out of its runs: the fitted terms'
    middle moves it as the docs' table says, where the published row holds the width
    response's."""
    from validation.predict.zoo import compare

    monkeypatch.syspath_prepend(str(ROOT / "examples" / "predict"))
    with tarfile.open(PREDICT / "recordings" / "zoo-results-h100" / f"{label}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    zoo = tmp_path / label / "zoo"
    taken = 0
    for run in (zoo / "runs").glob("*.json"):
        doc = json.loads(run.read_text())
        for profile in doc["op_profiles"]:
            for unit in profile.get("timed") or []:
                kept = [t for t in unit["times"] if t.get("width_scale", 1.0) == 1.0]
                taken += len(unit["times"]) - len(kept)
                unit["times"] = kept
        run.write_text(json.dumps(doc))
    assert taken > 0
    assert compare([zoo], None) == 0
    capsys.readouterr()
    rows = json.loads((zoo / "results.json").read_text())["rows"]
    got = next(r for r in rows if r["family"].startswith(family) and r["case"] == "size")
    published = json.loads((PREDICT / "zoo-results-h100.json").read_text())["rows"]
    mine = next(r for r in published if r.get("recording") == label and
                r["family"].startswith(family) and r["case"] == "size")
    assert got["error_pct"] == pytest.approx(without, abs=0.05)
    assert got["error_pct"] != pytest.approx(mine["error_pct"], abs=0.5)

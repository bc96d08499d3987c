"""The parsed-file cache: an entry serves while its sources are unchanged (their `stat` alone
while it is unchanged and not too recent, their bytes otherwise) and never after a change,
whatever the change keeps (size, modification time)."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import pytest

from gpuaudit import filecache
from gpuaudit.cost.catalog import load_catalog, write_catalog
from gpuaudit.cost.catalog.records import OfferColumns
from gpuaudit.model.cost import Offer


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(filecache.CACHE_DIR_ENV, str(tmp_path / "cache"))


def _cached(src: Path, builds: list[str]) -> str:
    def build() -> str:
        builds.append(src.read_text())
        return src.read_text()

    return filecache.cached("t", [src], build, encode=lambda v: v, decode=lambda v: v)


def _old(monkeypatch, seconds: float = 60.0) -> None:
    # As if the cache were read `seconds` later: the sources are no longer racy.
    real = filecache.time.time_ns
    monkeypatch.setattr(filecache.time, "time_ns", lambda: real() + int(seconds * 1e9))


def test_an_unchanged_source_is_read_back_on_its_stat_alone(tmp_path, monkeypatch):
    src = tmp_path / "a.txt"
    src.write_text("one")
    _old(monkeypatch)
    builds: list[str] = []
    assert _cached(src, builds) == "one" and builds == ["one"]
    hashed = []
    real = filecache.fingerprint
    monkeypatch.setattr(filecache, "fingerprint",
                        lambda *a, **k: hashed.append(1) or real(*a, **k))
    assert _cached(src, builds) == "one" and builds == ["one"]
    assert hashed == []  # the bytes were not read


def test_same_size_and_restored_mtime_is_still_a_change(tmp_path, monkeypatch):
    src = tmp_path / "a.txt"
    src.write_text("one")
    st = os.stat(src)
    _old(monkeypatch)
    builds: list[str] = []
    _cached(src, builds)
    src.write_text("two")  # same size
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))  # as `cp -p` or `touch -d` would
    assert _cached(src, builds) == "two" and builds == ["one", "two"]


def test_a_new_stat_with_the_same_fingerprint_is_served_then_trusted(tmp_path, monkeypatch):
    src = tmp_path / "a.txt"
    src.write_text("one")
    _old(monkeypatch)
    builds: list[str] = []
    _cached(src, builds)
    os.chmod(src, 0o600)  # a new change time; the same bytes, size and modification time
    assert _cached(src, builds) == "one" and builds == ["one"]
    hashed = []
    real = filecache.fingerprint
    monkeypatch.setattr(filecache, "fingerprint",
                        lambda *a, **k: hashed.append(1) or real(*a, **k))
    assert _cached(src, builds) == "one" and hashed == []  # its new stat was kept
    os.utime(src)  # a new modification time is a change, as it always was
    assert _cached(src, builds) == "one" and builds == ["one", "one"]


def test_a_source_changed_moments_ago_is_hashed_every_time(tmp_path, monkeypatch):
    src = tmp_path / "a.txt"
    src.write_text("one")
    builds: list[str] = []
    _cached(src, builds)
    hashed = []
    real = filecache.fingerprint
    monkeypatch.setattr(filecache, "fingerprint",
                        lambda *a, **k: hashed.append(1) or real(*a, **k))
    assert _cached(src, builds) == "one" and builds == ["one"] and hashed == [1]


def test_a_deleted_or_damaged_entry_means_parse_again(tmp_path, monkeypatch):
    src = tmp_path / "a.txt"
    src.write_text("one")
    _old(monkeypatch)
    builds: list[str] = []
    _cached(src, builds)
    (entry,) = (tmp_path / "cache").iterdir()
    entry.write_bytes(entry.read_bytes()[:-5])
    assert _cached(src, builds) == "one" and len(builds) == 2
    src.unlink()
    with pytest.raises(FileNotFoundError):
        _cached(src, builds)


def _offer(i: int) -> Offer:
    return Offer(provider="aws", instance_type=f"p5.{i}", region=f"r{i}", gpu_model="h100-sxm",
                 gpu_count=8, on_demand_price_per_hour=98.32 + i, source="t",
                 price_date=date(2025, 6, 1))


def test_a_catalog_read_back_is_columns_that_make_the_same_offers(tmp_path, monkeypatch):
    path = tmp_path / "c.csv"
    offers = [_offer(i) for i in range(5)]
    write_catalog(offers, path)
    first = load_catalog(path)
    assert not isinstance(first.offers, OfferColumns)  # parsed from the CSV
    again = load_catalog(path)
    assert isinstance(again.offers, OfferColumns)
    assert again.offers[3] == first.offers[3] and again.offers[-1] == first.offers[-1]
    assert [tuple(r) for r in again.offers.rows()] == [tuple(o) for o in first.offers]
    assert again.offers == first.offers and again == first and len(again.offers) == 5
    assert again.offers[1:3] == tuple(first.offers[1:3])

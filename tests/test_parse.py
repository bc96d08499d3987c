"""The one input grammar (gpuaudit.parse, docs/input.md): examples of each reader, and
properties over generated input — read correctly, or refused in one line naming the option."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaudit import parse, reading
from gpuaudit.errors import BadInputError

PROPERTY = settings(max_examples=150, deadline=None)
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def refused(fn, *args, **kwargs) -> str:
    with pytest.raises(BadInputError) as caught:
        fn(*args, **kwargs)
    message = str(caught.value)
    assert caught.value.exit_code == 2 and "\n" not in message
    return message


# -- examples ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("10m", 600), ("1.5h", 5400), ("2d", 172800), ("1h30m", 5400),
    ("500ms", 0.5), ("1w", 604800), ("1y", 365 * 86400), ("1d12h", 129600), (" 5m ", 300),
    ("2H", 7200),
])
def test_durations(text, seconds):
    assert parse.duration_s(text, "--x") == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "why"), [
    ("36", "give a unit"), ("30m1h", "largest"), ("1h1h", "largest"), ("1 h", "duration"),
    ("-5m", "more than zero"), ("-3", "more than zero"), ("inf", "duration"),
    ("nan", "duration"), ("0", "more than zero"), ("0s", "more than zero"), ("1x", "duration"),
    ("", "empty"), ("9" * 80 + "s", "longer"),
    ("101y", "at most 100y"),
])
def test_durations_refused(text, why):
    message = refused(parse.duration_s, text, "--deadline")
    assert message.startswith("--deadline ") and why in message


def test_duration_zero_bare_unit_and_bounds():
    assert parse.duration_s("0", "--grace", zero_ok=True) == 0
    assert parse.duration_s("300", "--timeout", bare_unit="s") == 300
    assert "at least 1s" in refused(parse.duration_s, "500ms", "--t", lo_s=1)
    assert "at most 1d" in refused(parse.duration_s, "2d", "--interval", hi_s=parse.DAY)


@pytest.mark.parametrize(("text", "value"), [
    ("7B", 7e9), ("1.3B", 1.3e9), ("125M", 125e6), ("500k", 500e3), ("1T", 1e12),
    ("2e9", 2e9), ("1.1K", 1100), ("3g", 3e9), ("42", 42),
])
def test_counts(text, value):
    assert parse.count(text, "--params") == value


@pytest.mark.parametrize("text", ["0", "-7B", "7X", "1,000", "inf", "nan", "1e400", "0.5",
                                  "7 billion", "B"])
def test_counts_refused(text):
    assert refused(parse.count, text, "--tokens").startswith("--tokens ")


@pytest.mark.parametrize(("text", "value"), [
    ("64", 64), ("8K", 8 << 10), ("1M", 1 << 20), ("4GiB", 4 << 30), ("2gb", 2 * 10**9),
    ("1.5K", 1536), ("1T", 1 << 40), ("10B", 10), ("3 MiB", 3 << 20),
])
def test_sizes(text, value):
    assert parse.size_bytes(text, "--size") == value


@pytest.mark.parametrize(("text", "why"), [
    ("0", "at least 1"), ("0.3K", "whole number of bytes"), ("2T", "at most"),
    ("99999999G", "at most"), ("1PB", "size like"), ("lots", "size like"), ("-1K", "at least"),
])
def test_sizes_refused(text, why):
    assert why in refused(parse.size_bytes, text, "--sizes")


def test_size_ranges():
    assert parse.size_range("1M:8G", "--sizes") == (1 << 20, 8 << 30)
    assert parse.size_range("64K", "--sizes") == (64 << 10, 64 << 10)
    assert "MIN is larger" in refused(parse.size_range, "8G:1M", "--sizes")
    assert "MIN:MAX" in refused(parse.size_range, "1M:", "--sizes")
    assert "at most 1 TiB" in refused(parse.size_range, "1M:99999999G", "--sizes")


def test_percent_fraction_money_currency():
    assert parse.percent("5%", "--p") == 5 and parse.percent(" 2.5 ", "--p") == 2.5
    assert "at most 100%" in refused(parse.percent, "1e308", "--rate-pct")
    assert "not be negative" in refused(parse.percent, "-1", "--p")
    assert parse.fraction("40%", "--mfu") == pytest.approx(0.4)
    assert parse.fraction("0.4", "--mfu") == 0.4
    assert "at most 1" in refused(parse.fraction, "1.5", "--mfu")
    assert "more than zero" in refused(parse.fraction, "0", "--mfu", zero_ok=False)
    assert parse.money("2.49", "--price") == 2.49
    for bad in ("inf", "nan", "$3", "-1", "0", "1e13"):
        assert refused(parse.money, bad, "--price").startswith("--price ")
    assert parse.money("0", "--fee", zero_ok=True) == 0
    assert parse.currency("usd") == "USD"
    message = refused(parse.currency, "UDS")
    assert "USD" in message and "EUR" in message


def test_integers_and_numbers():
    assert parse.integer("20", "--limit") == 20
    assert "at most 100000" in refused(parse.integer, "99999999999999999999999", "--limit",
                                       hi=100_000)
    assert "whole number" in refused(parse.integer, "1e3", "--limit")
    assert "at least 1" in refused(parse.integer, "0", "--layers")
    assert parse.number("1e3", "--n") == 1000
    for bad in ("inf", "-inf", "nan", "1e400", "0x10", "1,5"):
        refused(parse.number, bad, "--n")


def test_time_points():
    assert parse.time_point("now", "--until", now=NOW) == NOW
    assert parse.time_point("1h30m", "--since", now=NOW) == NOW - timedelta(minutes=90)
    assert parse.time_point("0m", "--since", now=NOW) == NOW
    assert parse.time_point("2025-02-28T10:00:00Z", "--since") == datetime(
        2025, 2, 28, 10, tzinfo=timezone.utc)
    for bad in ("yesterday", "12:00", "2025-13-01", "99999999999d", ""):
        assert "ISO time" in refused(parse.time_point, bad, "--since", now=NOW)


def test_gpus_listen_choice():
    assert parse.gpu_indices("0, 2,3") == [0, 2, 3]
    assert "twice" in refused(parse.gpu_indices, "0,0")
    for bad in ("a", "-1", "0,", "1.5", "99999"):
        refused(parse.gpu_indices, bad)
    assert parse.host_port(":9835") == ("127.0.0.1", 9835)
    assert parse.host_port("[::1]:80") == ("::1", 80)
    assert "HOST:PORT" in refused(parse.host_port, "localhost:99999")
    assert parse.choice("COST", "--sort", ("cost", "time")) == "cost"
    assert "cost, time" in refused(parse.choice, "cheap", "--sort", ("cost", "time"))


def test_unknown_names_suggest_close_ones():
    known = ["h200-sxm", "h100-sxm", "a100-sxm4-80gb", "b200"]
    message = str(parse.unknown("--gpu", "h200", known, "GPU in the catalog"))
    assert message.startswith("--gpu 'h200': no such GPU in the catalog; did you mean h200-sxm")
    assert "known: a100-sxm4-80gb, b200, h100-sxm, h200-sxm" in message
    assert parse.suggest("h100sxm", known)[0] == "h100-sxm"
    assert parse.suggest("zzz", known) == []


def test_files(tmp_path):
    text = tmp_path / "t.json"
    text.write_text('{"a": 1}')
    assert reading.read_json(text, "trace") == {"a": 1}
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\x00\x01\x02")
    assert "binary" in refused(reading.read_json, binary, "trace")
    latin = tmp_path / "l.json"
    latin.write_bytes(b'{"a": "\xe9"}')
    assert "not UTF-8" in refused(reading.read_json, latin, "trace")
    deep = tmp_path / "d.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert "nested too deeply" in refused(reading.read_json, deep, "trace")
    assert "cannot read" in refused(reading.read_json, tmp_path / "absent.json", "trace")
    assert "is a directory, not a regular file" in refused(reading.read_json, tmp_path, "trace")
    big = tmp_path / "big.txt"
    big.write_text("x" * 2048)
    assert "larger than" in refused(reading.read_text, big, "rules", max_bytes=1024)


def test_writable_file(tmp_path):
    parse.writable_file(tmp_path / "new.json", "--record")
    parse.writable_file(None, "--record")
    assert "does not exist" in refused(parse.writable_file, tmp_path / "no" / "x.json",
                                       "--record")
    assert "is a directory" in refused(parse.writable_file, tmp_path, "--record")


# -- properties --------------------------------------------------------------------------------

def _one_line_or_value(fn, text, option, check):
    try:
        value = fn(text, option)
    except BadInputError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith(option + " ")
        return
    check(value)


@PROPERTY
@given(st.text(max_size=40))
def test_every_reader_reads_or_refuses_in_one_line(text):
    finite = lambda v: math.isfinite(v)  # noqa: E731
    _one_line_or_value(parse.duration_s, text, "--d",
                       lambda v: 0 < v <= parse.MAX_DURATION_S)
    _one_line_or_value(parse.count, text, "--c", lambda v: 0 < v <= parse.MAX_COUNT)
    _one_line_or_value(parse.size_bytes, text, "--s",
                       lambda v: isinstance(v, int) and 1 <= v <= parse.MAX_SIZE_BYTES)
    _one_line_or_value(parse.size_range, text, "--r", lambda v: 1 <= v[0] <= v[1])
    _one_line_or_value(parse.percent, text, "--p", lambda v: 0 <= v <= 100)
    _one_line_or_value(parse.fraction, text, "--f", lambda v: 0 <= v <= 1)
    _one_line_or_value(parse.money, text, "--m", lambda v: 0 < v <= parse.MAX_MONEY)
    _one_line_or_value(parse.number, text, "--n", finite)
    _one_line_or_value(parse.integer, text, "--i", lambda v: 1 <= v <= parse.MAX_INT)
    _one_line_or_value(parse.currency, text, "--cur", lambda v: v in parse.ISO_CURRENCIES)
    _one_line_or_value(parse.gpu_indices, text, "--gpus", lambda v: len(set(v)) == len(v))
    _one_line_or_value(parse.host_port, text, "--listen", lambda v: 0 <= v[1] <= 65535)
    _one_line_or_value(lambda t, o: parse.time_point(t, o, now=NOW), text, "--since",
                       lambda v: v.tzinfo is not None)


UNITS = list(parse._DURATION_UNITS)


@PROPERTY
@given(st.lists(st.tuples(st.integers(0, 999), st.integers(0, 99)), min_size=1,
                max_size=len(UNITS)).flatmap(
    lambda parts: st.tuples(st.just(parts), st.permutations(UNITS).map(
        lambda units: sorted(units[:len(parts)], key=UNITS.index)))))
def test_durations_written_largest_first_read_back_exactly(case):
    parts, units = case
    text = "".join(f"{whole}.{frac:02d}{unit}" for (whole, frac), unit in zip(parts, units,
                                                                               strict=True))
    expected = sum(Decimal(f"{whole}.{frac:02d}") * Decimal(str(parse._DURATION_UNITS[u]))
                   for (whole, frac), u in zip(parts, units, strict=True))
    if expected == 0 or expected > parse.MAX_DURATION_S:
        refused(parse.duration_s, text, "--d")
    else:
        assert parse.duration_s(text, "--d") == pytest.approx(float(expected), rel=1e-12)


@PROPERTY
@given(st.integers(1, 10 * 365 * 86400))
def test_human_duration_reads_back(seconds):
    assert parse.duration_s(parse.human_duration(seconds), "--d") == seconds


@PROPERTY
@given(st.integers(1, 10**6), st.sampled_from(["", "k", "M", "B", "T", "G"]))
def test_counts_with_suffixes(n, suffix):
    scale = {"": 1, "k": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}[suffix]
    assert parse.count(f"{n}{suffix}", "--c") == n * scale


@PROPERTY
@given(st.integers(1, 4096), st.sampled_from(sorted(parse._SIZE_UNIT)))
def test_sizes_with_units(n, unit):
    value = n * parse._SIZE_UNIT[unit]
    if value > parse.MAX_SIZE_BYTES:
        assert "at most" in refused(parse.size_bytes, f"{n}{unit}", "--s")
    else:
        assert parse.size_bytes(f"{n}{unit}", "--s") == value
        assert parse.size_bytes(f"{n}{unit.upper()}", "--s") == value


@PROPERTY
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_any_float_as_typed(x):
    """What Python prints for any float: read exactly when finite and in bounds, else one
    line (inf, nan, 1e308 for a percentage)."""
    text = repr(x)
    try:
        value = parse.number(text, "--n", lo=None, hi=None)
    except BadInputError:
        assert not math.isfinite(x)
        return
    assert value == x
    _one_line_or_value(parse.percent, text, "--p", lambda v: 0 <= v <= 100 and v == x)


def test_an_unknown_name_with_nothing_close_still_reads_as_a_sentence():
    message = str(parse.unknown("--gpu", "zzz", ["h200-sxm", "b200"], "GPU"))
    assert message.endswith("no such GPU; known: b200, h200-sxm")

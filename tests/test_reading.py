"""The one reader of users' files (`gpuaudit.reading`), as a library: what it gives back for a
good file, and the one line it refuses the rest with."""

from __future__ import annotations

import gzip
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuaudit import reading
from gpuaudit.errors import BadInputError
from tests.support import damage


def refused(fn, *args, **kwargs) -> str:
    with pytest.raises(BadInputError) as caught:
        fn(*args, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=5000), limit=st.integers(0, 6000))
def test_gunzip_gives_back_what_was_packed_or_refuses_past_the_limit(data, limit):
    packed = gzip.compress(data)
    if len(data) <= limit:
        assert reading.gunzip(packed, "x", limit) == data
    else:
        assert "unpacks to more than" in refused(reading.gunzip, packed, "x", limit)


def test_gunzip_members_cuts_and_trailing_bytes():
    two = gzip.compress(b"ab") + gzip.compress(b"cd")
    assert reading.gunzip(two, "x") == b"abcd"
    assert reading.gunzip(gzip.compress(b"ab") + b"\0" * 8, "x") == b"ab"  # tar-like zeros
    assert "cut short" in refused(reading.gunzip, gzip.compress(b"abc" * 100)[:-12], "x")
    assert "after the end" in refused(reading.gunzip, gzip.compress(b"ab") + b"junk", "x")
    assert "damaged gzip" in refused(reading.gunzip, b"\x1f\x8b\x08\x00" + b"\xff" * 20, "x")


def test_a_bomb_is_refused_without_unpacking_it_all():
    bomb = damage.gzip_bomb()  # 300 MiB of zeros in about 300 KiB
    message = refused(reading.gunzip, bomb, "evidence e.json.gz")
    assert message == "evidence e.json.gz unpacks to more than 256 MiB: not one of ours"


def test_read_text(tmp_path):
    p = tmp_path / "c.csv"
    p.write_bytes("\ufeffa,b\n".encode())
    assert reading.read_text(p, "catalog") == "a,b\n"  # the spreadsheet's BOM dropped
    p.write_bytes(gzip.compress("é".encode()))
    assert reading.read_text(p, "catalog") == "é"
    p.write_bytes(b"caf\xe9")
    assert refused(reading.read_text, p, "catalog") == f"catalog {p} is not UTF-8 text (byte 3)"
    p.write_bytes(b"x" * 2048)
    assert "larger than 1024 bytes" in refused(reading.read_text, p, "rules", max_bytes=1024)


@pytest.mark.parametrize(("make", "kind"), [
    (damage.fifo, "a FIFO (named pipe)"), (damage.unix_socket, "a socket"),
    (damage.directory, "a directory"), (damage.dev_zero, "a character device"),
])
def test_what_is_not_a_regular_file_is_refused_before_it_is_read(tmp_path, make, kind):
    path = make(tmp_path, "x.json")
    with damage.deadline(10):
        message = refused(reading.read_bytes, path, "run file")
    assert message == f"run file {path}: is {kind}, not a regular file"


def test_a_missing_or_unreadable_file(tmp_path):
    assert refused(reading.read_bytes, tmp_path / "no.json", "run file") == \
        f"cannot read run file {tmp_path / 'no.json'}: no such file"
    if os.geteuid() != 0:  # root reads anything
        p = tmp_path / "locked.json"
        p.write_text("{}")
        p.chmod(0)
        assert "Permission denied" in refused(reading.read_bytes, p, "run file")


@pytest.mark.parametrize(("text", "said"), [
    ('{"a": NaN}', "NaN is not a JSON number (line 1 column 7)"),
    ('{"a": 1,\n "b": -Infinity}', "-Infinity is not a JSON number (line 2 column 7)"),
    ('{"a": 1e999}', "1e999 is too large for a number (line 1 column 7)"),
    ('{"NaN": "NaN", "b": NaN}', "NaN is not a JSON number (line 1 column 21)"),
    ("[" * 100_000, "nested too deeply"),
])
def test_json_as_rfc_8259_writes_it(text, said):
    assert said in refused(reading.load_json, text, "trace t.json")


def test_nan_where_a_snapshot_keeps_it():
    doc = reading.load_json('{"a": NaN}', "snapshot", nan_ok=True)
    assert doc["a"] != doc["a"]


def test_taking_apart_turns_a_documents_damage_into_one_line():
    damaged = pytest.raises(BadInputError,
                            match=r"^run ab's op profile is damaged: KeyError: 'x'$")
    with damaged, reading.taking_apart("run ab's op profile"):
        {}["x"]
    # not a document's damage but ours: left alone, with its traceback
    with pytest.raises(ZeroDivisionError), reading.taking_apart("run ab"):
        1 / 0  # noqa: B018


def _laughs(levels: int) -> str:
    """Nested aliases: each level names the one before nine times (9**levels items)."""
    parts = ['&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    parts += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "gpu_model: [" + ", ".join(parts) + "]\n"


def test_yaml_aliases_are_read_until_they_expand_past_the_bound():
    small = reading.load_yaml(_laughs(3), "f.yml")
    assert len(small["gpu_model"][2]) == 9 and small["gpu_model"][2][0][0][0] == "lol"
    with pytest.raises(BadInputError, match=r"^f\.yml: invalid YAML: its aliases expand"):
        reading.load_yaml(_laughs(9), "f.yml")  # 387 million items: refused at once
    with pytest.raises(BadInputError, match="an alias inside the node it names"):
        reading.load_yaml("a: &a [1, *a]\n", "f.yml")
    with pytest.raises(BadInputError, match=r"^f\.yml: invalid YAML at line 2: while parsing a "
                                           r"flow sequence, expected ',' or ']'"):
        reading.load_yaml("a: [1\n", "f.yml")


@pytest.mark.timeout(20)
def test_an_alias_bomb_in_the_files_that_take_yaml_is_one_line(tmp_path):
    from gpuaudit.fleet.expect import load_expectation
    from gpuaudit.specs.catalog import SpecCatalogError, load_catalog

    bomb = tmp_path / "bomb.yml"
    bomb.write_text(_laughs(9))
    with pytest.raises(BadInputError, match="expand to more than"):
        load_expectation(bomb)
    bomb.write_text("sources: {}\n" + _laughs(9).replace("gpu_model", "gpus"))
    with pytest.raises(SpecCatalogError, match="expand to more than"):
        load_catalog(bomb)

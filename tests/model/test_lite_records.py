"""Light records (`model/lite.py`) take their fields as dataclasses' generated __init__ does,
are frozen, and are what pydantic reads for a schema or a document."""

from __future__ import annotations

import dataclasses
from dataclasses import field

import pytest

from gpuaudit.model.lite import Lite, frozen, record


@record
class _Doc(Lite):
    name: str
    size_bytes: int = 0
    tags: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.size_bytes < 0:
            raise ValueError("size_bytes must be ≥ 0")


@frozen
class _Pair(Lite):
    left: float
    right: float = 1.0


def test_keywords_defaults_factories_and_post_init():
    d = _Doc(name="a")
    assert (d.name, d.size_bytes, d.tags) == ("a", 0, ())
    assert _Doc(name="b", size_bytes=3, tags=("x",)).tags == ("x",)
    with pytest.raises(ValueError, match="must be"):
        _Doc(name="c", size_bytes=-1)


@pytest.mark.parametrize("make, message", [
    (lambda: _Doc(), r"missing .*'name'"),
    (lambda: _Doc(name="a", colour="red"), "unexpected keyword argument 'colour'"),
    (lambda: _Doc("a"), "positional argument"),
    (lambda: _Pair(1.0, 2.0, 3.0), "positional argument"),
    (lambda: _Pair(1.0, left=2.0), "multiple values for argument 'left'"),
])
def test_wrong_arguments_are_refused_as_a_dataclass_would(make, message):
    with pytest.raises(TypeError, match=message):
        make()


def test_positional_fields_frozen_equal_and_replaced():
    p = _Pair(2.0)
    assert (p.left, p.right) == (2.0, 1.0) and p == _Pair(left=2.0, right=1.0)
    assert hash(p) == hash(_Pair(2.0, 1.0)) and p != _Pair(2.0, 3.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.left = 3.0  # type: ignore[misc]
    assert dataclasses.replace(p, right=5.0) == _Pair(2.0, 5.0)
    assert repr(p) == "_Pair(left=2.0, right=1.0)"


def test_pydantic_reads_and_makes_them():
    d = _Doc.model_validate({"name": "a", "size_bytes": 2})
    assert d == _Doc(name="a", size_bytes=2) and d.model_dump() == {
        "name": "a", "size_bytes": 2, "tags": ()}
    assert _Doc.model_json_schema()["required"] == ["name"]
    with pytest.raises(ValueError):
        _Doc.model_validate({"name": "a", "size_bytes": -1})

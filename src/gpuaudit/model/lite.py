"""Light records: immutable, slotted, keyword-only dataclasses with the part of pydantic's
interface the project uses (`model_dump`, `model_copy`, `model_json_schema`,
`model_validate`), for the records a fast command makes by the thousand (prices, pricing
models, recommendations).

Why not pydantic here: importing pydantic and building its record classes costs a command
about 100 ms before it does anything, and `gpuaudit recommend` must answer over 10,000 offers
in 200 ms end to end. These records import nothing but the standard library; pydantic is
imported only when a JSON Schema is asked for or a document is read back (`model_validate`),
and then reads the same classes (a stdlib dataclass is a type it understands).

A field's numeric bounds are written once, as `Annotated[float, Bound(gt=0)]`: pydantic reads
them into the JSON Schema, and `check_bounds` enforces them in a record's `__post_init__`
where the record takes user input (`Assumptions`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import math
import operator
import typing
from collections.abc import Callable
from typing import Any, TypeVar, overload

_T = TypeVar("_T")
_F = TypeVar("_F")

if typing.TYPE_CHECKING:  # the type checker learns what the decorators make (PEP 681)
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_: Any) -> Callable[[_F], _F]:
        return lambda f: f

# Per class, once: the field names, their bounds, pydantic's adapter (a schema, a document
# read back). Plain dicts: functools.cache cannot take a record class as a typed key.
_DUMPERS: dict[type, tuple[str, ...]] = {}
_BOUNDS: dict[type, tuple[tuple[str, Bound], ...]] = {}
_ADAPTERS: dict[type, Any] = {}
_UNSET = object()
_set = object.__setattr__


class Bound:
    """Numeric bounds of a field: ge, gt, le, lt (pydantic's names and meaning)."""

    __slots__ = ("ge", "gt", "le", "lt")

    def __init__(self, *, ge: float | None = None, gt: float | None = None,
                 le: float | None = None, lt: float | None = None) -> None:
        self.ge, self.gt, self.le, self.lt = ge, gt, le, lt

    def violated(self, value: Any) -> str | None:
        """Why `value` is out of bounds, or None."""
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if math.isnan(value):
            return "is not a number"
        for name, bound, ok in (("greater than or equal to", self.ge, operator.ge),
                                ("greater than", self.gt, operator.gt),
                                ("less than or equal to", self.le, operator.le),
                                ("less than", self.lt, operator.lt)):
            if bound is not None and not ok(value, bound):
                return f"must be {name} {bound:g}, not {value:g}"
        return None

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        # pydantic's hook for annotation metadata: the bounds go into the number's schema.
        schema = handler(source)
        for key in self.__slots__:
            value = getattr(self, key)
            if value is not None:
                schema[key] = value
        return schema


def _bounds(cls: type) -> tuple[tuple[str, Bound], ...]:
    found = _BOUNDS.get(cls)
    if found is None:
        found = _BOUNDS[cls] = _read_bounds(cls)
    return found


def _read_bounds(cls: type) -> tuple[tuple[str, Bound], ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for name, hint in hints.items():
        for part in (hint, *typing.get_args(hint)):  # X, or X | None
            for meta in getattr(part, "__metadata__", ()):
                if isinstance(meta, Bound):
                    out.append((name, meta))
    return tuple(out)


def check_bounds(record: Any) -> None:
    """ValueError naming the first field outside its `Bound`."""
    for name, bound in _bounds(type(record)):
        why = bound.violated(getattr(record, name))
        if why:
            raise ValueError(f"{type(record).__name__}.{name} {why}")


def _field_names(cls: type) -> tuple[str, ...]:
    names = _DUMPERS.get(cls)
    if names is None:
        names = _DUMPERS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def dump(value: Any, json: bool = False) -> Any:
    """A record as plain data, as pydantic's model_dump does: records become dicts; in JSON
    mode enums become their values, dates ISO 8601 text (UTC as Z), tuples lists."""
    if isinstance(value, Lite):
        return {name: dump(getattr(value, name), json) for name in _field_names(type(value))}
    if isinstance(value, enum.Enum):
        return value.value if json else value
    if isinstance(value, tuple):
        fields = getattr(value, "_fields", None)
        if fields is not None:  # a tuple-based record (Offer)
            return {name: dump(item, json) for name, item in zip(fields, value, strict=True)}
        items = [dump(item, json) for item in value]
        return items if json else tuple(items)
    if isinstance(value, list):
        return [dump(item, json) for item in value]
    if isinstance(value, dict):
        return {k: dump(v, json) for k, v in value.items()}
    if json and isinstance(value, dt.datetime):
        text = value.isoformat()
        return text[:-6] + "Z" if value.utcoffset() == dt.timedelta(0) else text
    if json and isinstance(value, dt.date):
        return value.isoformat()
    return value


def _adapter(cls: type) -> Any:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        from pydantic import TypeAdapter  # only for a schema or reading a document back

        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


class Lite:
    """The base of a light record (a frozen, slotted dataclass)."""

    __slots__ = ()
    # Read by pydantic (schema, model_validate): unknown fields are an error, as in Record.
    __pydantic_config__ = {"extra": "forbid"}  # noqa: RUF012 - a class-wide setting

    # Frozen, __eq__, __hash__ and __repr__ once for every record, instead of code generated
    # per class: dataclasses compiles each generated method (five more for a frozen class with
    # equality), and a command that imports 30 record classes paid ~30 ms for them.
    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, name, _UNSET) is not _UNSET:  # set already: not by __init__
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        _set(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _field_names(type(self)))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((self.__class__, self._values()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}"
                          for name in _field_names(type(self)))
        return f"{type(self).__name__}({inner})"

    def model_dump(self, *, mode: str = "python") -> dict[str, Any]:
        return dump(self, mode == "json")  # type: ignore[no-any-return]

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Any:
        return dataclasses.replace(self, **(update or {}))  # type: ignore[type-var]

    @classmethod
    def model_json_schema(cls) -> dict[str, Any]:
        return _adapter(cls).json_schema()  # type: ignore[no-any-return]

    @classmethod
    def model_validate(cls, data: Any) -> Any:
        return _adapter(cls).validate_python(data)


_RECORD = dataclasses.dataclass(slots=True, kw_only=True, repr=False, eq=False)


@dataclass_transform(kw_only_default=True, frozen_default=True)
def record(cls: type[_T]) -> type[_T]:
    """The decorator of a light record: ``@record class X(Lite): ...``. Immutability, equality,
    hash and repr come from `Lite` (a field can be set once, by __init__)."""
    made: type[_T] = _RECORD(cls)
    return made


@overload
def frozen(cls: type[_T], /) -> type[_T]: ...
@overload
def frozen(*, kw_only: bool = False) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(frozen_default=True)
def frozen(cls: Any = None, /, **options: Any) -> Any:
    """A frozen dataclass for code, not documents: ``@frozen class X(Lite): ...`` (positional
    fields allowed; ``@frozen(kw_only=True)``). Only __init__ is generated (about a fifth of
    what ``dataclass(frozen=True)`` costs at import); immutability, equality, hash and repr
    come from `Lite`. Slotted, so a zero-argument super() does not work in its methods
    (Python < 3.14): name the base class."""
    def wrap(c: type) -> type:
        made: type = dataclasses.dataclass(c, slots=True, repr=False, eq=False, **options)
        return made
    return wrap if cls is None else wrap(cls)


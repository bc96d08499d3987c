"""Light records: immutable, keyword-only dataclasses with the part of pydantic's
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
import functools
import math
import typing
from typing import Any

_DUMPERS: dict[type, tuple[str, ...]] = {}


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
        for name, bound, ok in (("greater than or equal to", self.ge, lambda b: value >= b),
                                ("greater than", self.gt, lambda b: value > b),
                                ("less than or equal to", self.le, lambda b: value <= b),
                                ("less than", self.lt, lambda b: value < b)):
            if bound is not None and not ok(bound):
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


@functools.cache
def _bounds(cls: type) -> tuple[tuple[str, Bound], ...]:
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


@functools.cache
def _adapter(cls: type) -> Any:
    from pydantic import TypeAdapter  # only for a schema or reading a document back

    return TypeAdapter(cls)


class Lite:
    """The base of a light record (a frozen dataclass)."""

    __slots__ = ()
    # Read by pydantic (schema, model_validate): unknown fields are an error, as in Record.
    __pydantic_config__ = {"extra": "forbid"}  # noqa: RUF012 - a class-wide setting

    # __init__, frozen, __eq__, __hash__ and __repr__ once for every record, instead of code
    # generated per class: dataclasses compiles each generated method (the __init__ alone is
    # three quarters of declaring a record), and a command that imports 40 record classes
    # paid ~30 ms for them. dataclasses still reads the fields (`dataclasses.fields`,
    # `replace`, pydantic's schema); this __init__ takes them as its generated one would.
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        fields, positional = _PLANS.get(cls) or _plan(cls)
        values = self.__dict__
        if len(args) > len(positional):
            raise TypeError(f"{cls.__name__}() takes {len(positional)} positional "
                            f"argument(s) but {len(args)} were given")
        values.update(zip(positional, args, strict=False))
        for name, value in kwargs.items():
            if name in values:
                raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
            values[name] = value
        for name, default, factory in fields:
            if name not in values:
                if default is not dataclasses.MISSING:
                    values[name] = default
                elif factory is not dataclasses.MISSING:
                    values[name] = factory()
                else:
                    raise TypeError(f"{cls.__name__}() missing required argument: {name!r}")
        if len(values) != len(fields):
            unknown = sorted(set(values) - {name for name, _, _ in fields})
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument "
                            f"{unknown[0]!r}")
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    # The fields live in the instance's __dict__ (no slots): asking it whether a field is set
    # costs nothing, where asking an unset slot raises (half of making a record).
    def __setattr__(self, name: str, value: Any) -> None:
        fields = self.__dict__
        if name in fields:  # set already: not by __init__
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        fields[name] = value

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _field_names(type(self)))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

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


# class → its fields as __init__ takes them ((name, default, default factory), in order) and
# the names it takes by position
_PLANS: dict[type, tuple[tuple[tuple[str, Any, Any], ...], tuple[str, ...]]] = {}


def _plan(cls: type) -> tuple[tuple[tuple[str, Any, Any], ...], tuple[str, ...]]:
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    plan = _PLANS[cls] = (tuple((f.name, f.default, f.default_factory) for f in fields),
                          tuple(f.name for f in fields if not f.kw_only))
    return plan


record = dataclasses.dataclass(kw_only=True, init=False, repr=False, eq=False)
"""The decorator of a light record: ``@record class X(Lite): ...``. __init__, immutability,
equality, hash and repr come from `Lite` (a field can be set once, by __init__)."""


def frozen(cls: Any = None, /, **options: Any) -> Any:
    """A frozen dataclass for code, not documents: ``@frozen class X(Lite): ...`` (positional
    fields allowed; ``@frozen(kw_only=True)``). Nothing is generated: __init__, immutability,
    equality, hash and repr come from `Lite`."""
    def wrap(c: type) -> type:
        return dataclasses.dataclass(c, init=False, repr=False,  # type: ignore[no-any-return]
                                     eq=False, **options)
    return wrap if cls is None else wrap(cls)


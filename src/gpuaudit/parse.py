"""What people type, read one way everywhere: numbers, durations, counts, byte sizes,
percentages, fractions, money, currencies, points in time, GPU lists, choices; and the files
they name. The grammar is written down once, in docs/input.md.

Every function takes the text and the option it came from, and returns the value or raises
`BadInputError` with one line that names the option, repeats what was typed and gives an
example. Every value is finite and inside bounds the caller states (there are defaults), so
no option can ask for a sweep to petabytes, a wait of centuries or an integer the store cannot
hold. Numbers are read as decimals, so 1.1K is exactly 1100.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path

from gpuaudit.errors import BadInputError

# Longer input is never a number, a duration or a size anyone meant (and int() of a
# 5,000-digit string is slow and then refused by Python itself).
MAX_TEXT = 64

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0
WEEK = 7 * DAY
YEAR = 365 * DAY
MAX_DURATION_S = 100 * YEAR
KIB, MIB, GIB, TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
# More than any GPU's memory: a size beyond this is a typo, and a sweep up to it ends.
MAX_SIZE_BYTES = TIB
MAX_COUNT = 1e18
MAX_MONEY = 1e12
MAX_INT = 2**31 - 1

# ASCII digits only: Python's \d and int() also take "１２" (full-width) and other scripts'.
_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_NUMBER_RE = re.compile(_NUMBER)

# ISO 4217 codes a GPU price is plausibly quoted in. A code outside this set is far more often
# a typo ("UDS") or a symbol ("$") than a real currency.
ISO_CURRENCIES: frozenset[str] = frozenset({
    "USD", "EUR", "GBP", "CNY", "JPY", "KRW", "INR", "SGD", "HKD", "TWD", "AUD", "CAD", "CHF",
    "SEK", "NOK", "DKK", "PLN", "CZK", "BRL", "MXN", "ZAR", "AED", "SAR", "ILS", "NZD", "RUB",
    "TRY", "IDR", "THB", "MYR", "VND", "PHP",
})


def _bad(option: str, text: object, why: str) -> BadInputError:
    shown = str(text).strip()
    shown = shown if len(shown) <= MAX_TEXT else f"{shown[:40]}…"
    return BadInputError(f"{option} {shown!r}: {why}")


def _clean(text: object, option: str) -> str:
    if not isinstance(text, str):
        text = str(text)
    s = text.strip()
    if not s:
        raise _bad(option, text, "empty")
    if len(s) > MAX_TEXT:
        raise _bad(option, text, f"longer than {MAX_TEXT} characters")
    return s


def _g(x: float) -> str:
    """A bound as people write it: 100, 0.5, 1e+12."""
    return f"{x:g}"


def _check_range(value: Decimal | float, option: str, text: str, *, lo: float | None,
                 hi: float | None, lo_open: bool, unit: str = "") -> None:
    if lo is not None and (value <= lo if lo_open else value < lo):
        if lo == 0:
            raise _bad(option, text, "must be more than zero" if lo_open
                       else "must not be negative")
        raise _bad(option, text, f"must be {'more than' if lo_open else 'at least'} "
                                 f"{_g(lo)}{unit}")
    if hi is not None and value > hi:
        raise _bad(option, text, f"must be at most {_g(hi)}{unit}")


def _decimal(s: str) -> Decimal | None:
    if not _NUMBER_RE.fullmatch(s):
        return None
    try:
        return Decimal(s)
    except InvalidOperation:  # pragma: no cover - the pattern admits only valid literals
        return None


# -- numbers -----------------------------------------------------------------------------------


def number(text: object, option: str, *, lo: float | None = 0.0, hi: float | None = MAX_COUNT,
           lo_open: bool = False, example: str = "2.5") -> float:
    """A plain decimal number ('2.5', '1e3', '.5'), finite, within [lo, hi] ((lo, hi] with
    lo_open). No 'inf', 'nan', suffixes or thousands separators."""
    s = _clean(text, option)
    value = _decimal(s)
    if value is None:
        raise _bad(option, text, f"expected a number like {example}")
    _check_range(value, option, s, lo=lo, hi=hi, lo_open=lo_open)
    return float(value)


def integer(text: object, option: str, *, lo: int | None = 1, hi: int | None = MAX_INT,
            example: str = "10") -> int:
    """A whole number written with digits ('10', '+3'), within [lo, hi]."""
    s = _clean(text, option)
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise _bad(option, text, f"expected a whole number like {example}")
    value = int(s)
    _check_range(value, option, s, lo=lo, hi=hi, lo_open=False)
    return value


_COUNT_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12,
                 "P": 10**15}
_COUNT_RE = re.compile(rf"({_NUMBER})\s*([kKmMbBgGtTpP]?)")


def count(text: object, option: str, *, lo: float = 0.0, hi: float = MAX_COUNT,
          whole: bool = True, example: str = "7B") -> float:
    """A count of things (parameters, tokens, samples): a number with an optional decimal
    suffix K (10^3), M (10^6), B or G (10^9), T (10^12), P (10^15), any case: '7B', '1.3B',
    '500k', '2e9'. More than `lo` (zero), at most `hi`; `whole`: a whole number of things."""
    s = _clean(text, option).replace(" ", "")
    m = _COUNT_RE.fullmatch(s)
    if m is None:
        raise _bad(option, text, f"expected a number with an optional K, M, B or T suffix, "
                                 f"like {example}")
    value = Decimal(m[1]) * _COUNT_SUFFIX[m[2].upper()]
    _check_range(value, option, s, lo=lo, hi=hi, lo_open=True)
    if whole and value != value.to_integral_value():
        raise _bad(option, text, "must be a whole number")
    return float(value)


# -- durations ---------------------------------------------------------------------------------

_DURATION_UNITS = {"y": YEAR, "w": 7 * DAY, "d": DAY, "h": HOUR, "m": MINUTE, "s": 1.0,
                   "ms": 0.001}
_UNIT_ORDER = tuple(_DURATION_UNITS)
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?|\.[0-9]+)(ms|[ywdhms])")


def _duration_parts(s: str) -> Decimal | None:
    """Seconds in 'NUMBER UNIT…' with units largest first, each once; None if not that."""
    pos, value, last = 0, Decimal(0), -1
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            return None
        unit = _UNIT_ORDER.index(m[2])
        if unit <= last:
            return None
        last = unit
        value += Decimal(m[1]) * Decimal(str(_DURATION_UNITS[m[2]]))
        pos = m.end()
    return value if pos else None


def duration_s(text: object, option: str, *, lo_s: float = 0.0, hi_s: float = MAX_DURATION_S,
               zero_ok: bool = False, bare_unit: str | None = None,
               example: str = "90s, 10m, 1.5h, 2d, 1h30m") -> float:
    """Seconds in a duration: parts NUMBER UNIT, units y (365 d), w, d, h, m, s, ms, largest
    first, each at most once ('1h30m', '1.5h', '500ms'). '0' is zero where zero is allowed.
    A bare number is refused (is 36 hours or seconds?) unless the option documents its unit
    (`bare_unit`, one of the units). A superset of Prometheus's duration grammar."""
    s = _clean(text, option).lower()
    bare = _decimal(s)
    if bare is not None and bare == 0 and zero_ok:
        return 0.0
    if bare is not None:
        if bare <= 0:
            raise _bad(option, text, "must be more than zero")
        if bare_unit is None:
            raise _bad(option, text, f"give a unit, like {s}s, {s}m or {s}h")
        value = bare * Decimal(str(_DURATION_UNITS[bare_unit]))
    else:
        parsed = _duration_parts(s)
        if parsed is None and s.startswith("-") and _duration_parts(s[1:]) is not None:
            raise _bad(option, text, "must be more than zero")
        if parsed is None:
            raise _bad(option, text, f"expected a duration like {example} (units largest "
                                     "first, each once)")
        value = parsed
    if value == 0 and zero_ok:
        return 0.0
    if value <= 0:
        raise _bad(option, text, "must be more than zero")
    if value < Decimal(str(lo_s)):
        raise _bad(option, text, f"must be at least {human_duration(lo_s)}")
    if value > Decimal(str(hi_s)):
        raise _bad(option, text, f"must be at most {human_duration(hi_s)}")
    return float(value)


def human_duration(seconds: float) -> str:
    """90 → '1m30s', 0.5 → '500ms', 86400 → '1d': the grammar's own spelling."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    out, rest = [], seconds
    for unit in ("y", "w", "d", "h", "m"):
        n, rest = divmod(rest, _DURATION_UNITS[unit])
        if n:
            out.append(f"{int(n)}{unit}")
    if rest or not out:
        out.append(f"{rest:g}s")
    return "".join(out)


_TIME_HINT = ("expected a duration back from now (30m, 1h, 2d, 1h30m), 'now' or an ISO time "
              "(2025-03-01T12:00:00Z)")


def time_point(text: object, option: str, *, now: datetime | None = None,
               hi_back_s: float = MAX_DURATION_S) -> datetime:
    """A point in time, in UTC: 'now', a duration back from now ('30m', '2d', '1h30m'), or an
    ISO 8601 date or time ('2025-03-01', '2025-03-01T12:00:00Z', '2025-03-01 14:00+02:00'; one
    without an offset is this machine's local time, as a person typing it means). A time
    after now is refused: what these options look back at has not happened yet."""
    if not str(text).strip():
        raise _bad(option, text, _TIME_HINT)
    s = _clean(text, option)
    base = now if now is not None else datetime.now(timezone.utc)
    base = (base.replace(tzinfo=timezone.utc) if base.tzinfo is None else base
            ).astimezone(timezone.utc)
    if s.lower() == "now":
        return base
    back = _duration_parts(s.lower())
    if back is not None:
        if back > Decimal(str(hi_back_s)):
            raise _bad(option, text, f"at most {human_duration(hi_back_s)} back; "
                                     + _TIME_HINT)
        return base - timedelta(seconds=float(back))
    iso = s[:-1] + "+00:00" if s[-1:] in ("Z", "z") else s  # Python 3.10 knows no "Z"
    try:
        parsed = datetime.fromisoformat(iso)
        if parsed.tzinfo is None:
            parsed = parsed.astimezone()  # local time
        parsed = parsed.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        raise _bad(option, text, _TIME_HINT) from None
    if parsed > base + timedelta(minutes=1):  # a clock a little ahead is not the user's fault
        raise _bad(option, text, f"is in the future (now is {base:%Y-%m-%d %H:%M} UTC)")
    return parsed


def day(text: object, option: str) -> date:
    """A calendar date, ISO 8601: '2026-01-31'."""
    s = _clean(text, option)
    try:
        return date.fromisoformat(s)
    except ValueError:
        raise _bad(option, text, "expected a date like 2026-01-31") from None


# -- sizes ---------------------------------------------------------------------------------------

_SIZE_UNIT = {"": 1, "b": 1,
              "k": KIB, "kib": KIB, "ki": KIB, "kb": 10**3,
              "m": MIB, "mib": MIB, "mi": MIB, "mb": 10**6,
              "g": GIB, "gib": GIB, "gi": GIB, "gb": 10**9,
              "t": TIB, "tib": TIB, "ti": TIB, "tb": 10**12}
_SIZE_RE = re.compile(rf"({_NUMBER})\s*([a-zA-Z]*)")


def size_bytes(text: object, option: str, *, lo: int = 1, hi: int = MAX_SIZE_BYTES,
               example: str = "64K, 1M, 4GiB") -> int:
    """Bytes: a number with an optional unit. K, M, G, T and KiB, MiB, GiB, TiB are binary
    (as nccl-tests' -b/-e and nvbandwidth count); KB, MB, GB, TB are decimal; B or nothing is
    bytes. Any case. A whole number of bytes within [lo, hi]."""
    s = _clean(text, option)
    m = _SIZE_RE.fullmatch(s)
    if m is None or m[2].lower() not in _SIZE_UNIT:
        raise _bad(option, text, f"expected a size like {example}")
    value = Decimal(m[1]) * _SIZE_UNIT[m[2].lower()]
    if value != value.to_integral_value():
        raise _bad(option, text, "not a whole number of bytes")
    if value < lo:
        raise _bad(option, text, f"must be at least {human_bytes(lo)}")
    if value > hi:
        raise _bad(option, text, f"must be at most {human_bytes(hi)}")
    return int(value)


def size_range(text: object, option: str, *, lo: int = 1, hi: int = MAX_SIZE_BYTES
               ) -> tuple[int, int]:
    """'MIN:MAX' (or one SIZE for both) in bytes, MIN ≤ MAX, each within [lo, hi]."""
    s = _clean(text, option)
    first, sep, second = s.partition(":")
    if sep and (not first.strip() or not second.strip()):
        raise _bad(option, text, "expected MIN:MAX like 1M:8G")
    a = size_bytes(first, option, lo=lo, hi=hi)
    b = size_bytes(second, option, lo=lo, hi=hi) if sep else a
    if a > b:
        raise _bad(option, text, "MIN is larger than MAX")
    return a, b


def human_bytes(n: float) -> str:
    """8 B, 64 KiB, 2 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.4g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


# -- shares and money --------------------------------------------------------------------------


def percent(text: object, option: str, *, lo: float = 0.0, hi: float = 100.0,
            lo_open: bool = False) -> float:
    """A percentage, with or without the sign: '5', '5%', '2.5 %'. Returned as 5.0."""
    s = _clean(text, option).removesuffix("%").strip()
    value = _decimal(s)
    if value is None:
        raise _bad(option, text, "expected a percentage like 5 or 5%")
    _check_range(value, option, str(text).strip(), lo=lo, hi=hi, lo_open=lo_open, unit="%")
    return float(value)


def fraction(text: object, option: str, *, zero_ok: bool = True, one_ok: bool = True) -> float:
    """A share between 0 and 1: '0.4', or as a percentage '40%'."""
    s = _clean(text, option)
    if s.endswith("%"):
        value = Decimal(str(percent(s, option))) / 100
    else:
        d = _decimal(s)
        if d is None:
            raise _bad(option, text, "expected a fraction like 0.4 or 40%")
        value = d
    if value < 0 or (value == 0 and not zero_ok):
        raise _bad(option, text, "must be more than zero" if not zero_ok
                   else "must not be negative")
    if value > 1 or (value == 1 and not one_ok):
        raise _bad(option, text, "must be at most 1 (100%)" if one_ok
                   else "must be less than 1 (100%)")
    return float(value)


def money(text: object, option: str, *, zero_ok: bool = False, hi: float = MAX_MONEY,
          example: str = "3.5") -> float:
    """An amount of money in the currency the command states: a plain number ('2.49',
    '45000'), more than zero (or zero where `zero_ok`), at most `hi`. No symbols."""
    s = _clean(text, option)
    if _decimal(s) is None:
        raise _bad(option, text, f"expected an amount like {example} (no currency symbol)")
    return number(s, option, lo=0.0, lo_open=not zero_ok, hi=hi)


def currency(text: object, option: str = "--currency") -> str:
    """An ISO 4217 code among those GPU prices are quoted in, any case: 'usd' → 'USD'."""
    code = _clean(text, option).upper()
    if code not in ISO_CURRENCIES:
        raise _bad(option, text, "expected an ISO 4217 currency code: "
                                 + ", ".join(sorted(ISO_CURRENCIES)))
    return code


# -- lists, addresses, names ---------------------------------------------------------------------


def gpu_indices(text: object, option: str = "--gpus", *, hi: int = 1023) -> list[int]:
    """GPU numbers as inspect numbers them: '0', '0,1', '0, 2, 3'. Each once."""
    s = _clean(text, option)
    parts = [p.strip() for p in s.split(",")]
    if not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise _bad(option, text, "expected GPU numbers like 0,1")
    found = [int(p) for p in parts]
    if any(i > hi for i in found):
        raise _bad(option, text, f"GPU numbers go up to {hi}")
    twice = sorted({i for i in found if found.count(i) > 1})
    if twice:
        raise _bad(option, text, f"GPU {twice[0]} given twice")
    return found


def host_port(text: object, option: str = "--listen") -> tuple[str, int]:
    """'HOST:PORT', '[::1]:9835' or ':9835' (127.0.0.1); port 0 picks a free one."""
    s = _clean(text, option)
    host, sep, port = s.rpartition(":")
    if not sep or not re.fullmatch(r"[0-9]{1,5}", port) or int(port) > 65535:
        raise _bad(option, text, "expected HOST:PORT like 127.0.0.1:9835")
    return host.strip("[]") or "127.0.0.1", int(port)


def choice(text: object, option: str, choices: Sequence[str]) -> str:
    """One of `choices` (any case)."""
    s = _clean(text, option).lower()
    for c in choices:
        if c.lower() == s:
            return c
    raise _bad(option, text, f"expected one of {', '.join(choices)}")


def suggest(value: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known ids a mistyped one was probably meant to be: those it begins (h200 →
    h200-sxm, h200-nvl), then the closest spellings."""
    pool = sorted(set(known))
    low = value.strip().lower()
    starts = [k for k in pool if k.lower().startswith(low) and low]
    close = difflib.get_close_matches(low, [k.lower() for k in pool], n=n, cutoff=0.6)
    by_low = {k.lower(): k for k in pool}
    picks = starts + [by_low[c] for c in close if by_low[c] not in starts]
    return picks[:n]


def known_hint(value: str, known: Iterable[str]) -> str:
    """'; did you mean h200-sxm or h200-nvl? known: a100-…, …' for an id that matched nothing."""
    pool = sorted(set(known))
    picks = suggest(value, pool)
    said = ", ".join(picks[:-1]) + (" or " if len(picks) > 1 else "") + (picks[-1] if picks
                                                                       else "")
    hint = f"; did you mean {said}?" if picks else ""
    if not pool:
        return hint + " (none known)"
    shown = ", ".join(pool[:30]) + (f", … ({len(pool)} in all)" if len(pool) > 30 else "")
    return f"{hint} known: {shown}" if hint else f"; known: {shown}"


def unknown(option: str, value: str, known: Iterable[str], what: str) -> BadInputError:
    """"--gpu 'h200': no such GPU in the catalog; did you mean h200-sxm or h200-nvl? known:
    …" (one line)."""
    return _bad(option, value, f"no such {what}{known_hint(value, known)}")


# -- files -------------------------------------------------------------------------------------
# Files users name are read by `gpuaudit.reading`: regular files only, bounded before and
# after decompression, strict UTF-8 and JSON.


def writable_file(path: str | Path | None, option: str) -> None:
    """Check, before any work, that a file can be written at `path`: its folder exists and
    takes new files, it is not a folder, and if it exists it may be written. What the work
    produces must not be lost at the end for want of a folder."""
    if path is None:
        return
    p = Path(path)
    _name_fits(p, option)
    if p.is_dir():
        raise BadInputError(f"{option} {p}: is a directory; name a file")
    if p.is_socket():
        raise BadInputError(f"{option} {p}: is a socket; name a file")
    parent = p.parent
    if not parent.is_dir():
        raise BadInputError(f"{option} {p}: the directory {parent} does not exist")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise BadInputError(f"{option} {p}: not writable")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise BadInputError(f"{option} {p}: cannot create files in {parent}")


def _name_fits(p: Path, option: str) -> None:
    """A name longer than the file system holds is the user's to shorten (ENAMETOOLONG would
    otherwise come at the end, after the work)."""
    parent = p.parent
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX") if parent.is_dir() else 255
    except (OSError, ValueError):
        name_max = 255
    if len(os.fsencode(p.name)) > name_max:
        raise BadInputError(f"{option}: the file name is longer than the {name_max} bytes "
                            "this file system takes")
    if len(os.fsencode(str(p.absolute()))) >= 4096:
        raise BadInputError(f"{option}: the path is longer than the 4096 bytes Linux takes")


def finite(value: float, what: str) -> float:
    """A number from a file or a computation, checked: no inf, no nan."""
    if not math.isfinite(value):
        raise BadInputError(f"{what}: {value} is not a finite number")
    return value

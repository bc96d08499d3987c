"""The model zoo's comparison as markdown: the held-out and development tables (each case's
prediction, band, measurement and error) and the timing controls; `show` prints them from a
compare's results.json (`zoo.py table`): by default the current evidence, each family's
latest full recording (`current`), with `every` each recording's tables as published."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from validation.predict.rounds import MIN_MATCHED, PACE_TOLERANCE


def control_table(controls: list[dict[str, Any]]) -> str:
    if not controls:
        return ""
    host = any(c.get("host_fresh_ms") for c in controls)  # recordings with batch-1 targets
    again = any(c.get("fresh_again_ms") for c in controls)  # recordings before the rounds
    rounds = any(c.get("rounds") for c in controls)
    # controls of several recordings (the published table's two loans) say whose they are
    recs = len({c.get("recording") for c in controls}) > 1
    head = ["family"] + (["recording"] if recs else []) + ["precision", "profiled run",
                                                            "fresh process"]
    head += ["again"] if again else []
    head += ["rounds (min–max)", "rounds at its pace"] if rounds else []
    head += ["ratio"] + (["host, recorded", "host, fresh"] if host else [])
    retries = any("alloc_retries" in c for c in controls)  # recordings with the counters
    head += ["allocator retries"] if retries else []
    lines = ["**Timing controls** (the source's step in the profiled run ÷ the same step "
             "timed in a fresh process"
             + (", where timed again after the other targets" if again else "")
             + (f"; timed in rounds, each round's median and the rounds within "
                f"{PACE_TOLERANCE * 100:.0f} % of the profiled step" if rounds else "")
             + ("; the host's time per step the profile recorded, its step at batch 1, beside "
                "the same timed in the fresh process" if host else "")
             + ("; the fresh process's caching allocator's retries after a failed allocation"
                if retries else "") + "):", "",
             "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for c in controls:
        cells = [c["family"]] + ([RECORDER.get(c.get("recording"), "")] if recs else [])
        cells += [c["precision"], _ms(c["profiled_run_ms"]), _ms(c["fresh_ms"])]
        cells += [_ms(c.get("fresh_again_ms"))] if again else []
        if rounds:
            cells += ([f"{c['rounds_low_ms']:.2f}–{c['rounds_high_ms']:.2f} ms",
                       f"{c['rounds_at_pace']} of {c['rounds']}"] if c.get("rounds")
                      else ["", ""])
        cells.append(f"{c['ratio']:.2f}")
        cells += [_ms(c.get("host_recorded_ms")), _ms(c.get("host_fresh_ms"))] if host else []
        cells += [str(c.get("alloc_retries", ""))] if retries else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _ms(v: float | None) -> str:
    return f"{v:.2f} ms" if v else ""


def _num(v: float) -> str:
    """Samples/s as the tables show them: 3 figures below 1,000, whole numbers above,
    thousands as k past 100,000."""
    if v >= 1e5:
        return f"{v / 1e3:,.0f} k"
    return f"{v:,.0f}" if v >= 999.5 else f"{v:.3g}"


_ONES = ("", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
         "ninth")
_TEENS = ("tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth",
          "sixteenth", "seventeenth", "eighteenth", "nineteenth")
_TENS = ("", "", "twent", "thirt", "fort", "fift", "sixt", "sevent", "eight", "ninet")


def _ordinal(n: int) -> tuple[str, str]:
    """A recording's label as the results name it ("forty-third") and as tables print it
    ("43rd"), 1 to 99."""
    if n < 10:
        word = _ONES[n]
    elif n < 20:
        word = _TEENS[n - 10]
    elif n % 10 == 0:
        word = f"{_TENS[n // 10]}ieth"
    else:
        word = f"{_TENS[n // 10]}y-{_ONES[n % 10]}"
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return word, f"{n}{suffix}"


# the recordings in the order they were made: a family's latest is the one it is read from
RECORDER = dict(_ordinal(n) for n in range(1, 100))


def table(rows: list[dict[str, Any]]) -> str:
    """The held-out and the development tables: each case's prediction, its band, the
    measurement and the error, marked where it misses 10 % or its band; one table per
    recording where a set holds several (the same cases recorded on two loans)."""
    out = []
    for which, title in (("held_out", "Held-out families"),
                         ("development", "Development families")):
        mine = [r for r in rows if r["set"] == which]
        recs = list(dict.fromkeys(r["recording"] for r in mine if r.get("recording")))
        if len(recs) < 2:
            out += _block(title, mine)
            continue
        for rec in recs:
            out += _block(f"{title}, {RECORDER.get(rec, rec)} recording",
                          [r for r in mine if r.get("recording") == rec])
        if left := [r for r in mine if not r.get("recording")]:
            out += _block(f"{title}, not recorded", left)
    return "\n".join(out + _footnotes(rows)) + "\n"


def _footnotes(rows: list[dict[str, Any]]) -> list[str]:
    """What the tables' marks (² and ³) mean, where their rows carry them."""
    out = []
    if any("measured_fresh" in r and not r["measured_fresh"] for r in rows):
        out += ["² measured in the process that had run the profiler, which times host-bound "
                "steps long (the timing controls below); the others in a fresh process.", ""]
    if any("pace_matched" in r for r in rows):
        out += [f"Targets timed in rounds beside their source are measured over the rounds "
                f"where the source ran within {PACE_TOLERANCE * 100:.0f} % of its profiled "
                f"step (the host's pace the prediction starts from); ³ marks those where "
                f"fewer than {MIN_MATCHED} rounds did, measured over all rounds.", ""]
    return out


def current(rows: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """Per (set, family), its latest recording (`RECORDER`'s order) that measured as many of
    its cases as any did (a recording whose budget cut the targets measures two)."""
    order = list(RECORDER)
    out: dict[tuple[str, str], str] = {}
    for which in ("held_out", "development"):
        for fam in dict.fromkeys(r["family"] for r in rows if r["set"] == which):
            mine = [r for r in rows if r["set"] == which and r["family"] == fam
                    and "error_pct" in r and r.get("recording") in order]
            if not mine:
                continue
            per = {rec: sum(1 for r in mine if r["recording"] == rec)
                   for rec in dict.fromkeys(r["recording"] for r in mine)}
            most = max(per.values())
            out[(which, fam)] = max((rec for rec, n in per.items() if n == most),
                                    key=order.index)
    return out


def current_table(rows: list[dict[str, Any]]) -> str:
    """Per family, its `current` recording: how many of its cases came within 10 % and
    inside their band, and the ones that did not. Empty for the rows of one recording."""
    if len({r.get("recording") for r in rows}) < 2:
        return ""
    out = ["**Current, per family** (each family's latest recording that measured all the "
           "cases any did; its cases follow):", "",
           "| set | family | recording | within 10 % | inside their band | missed |",
           "| --- | --- | --- | --- | --- | --- |"]
    names = {"held_out": "held-out", "development": "development"}
    for (which, fam), rec in current(rows).items():
        cases = [r for r in rows if r["set"] == which and r["family"] == fam
                 and r.get("recording") == rec and "error_pct" in r]
        within, inside, _ = _counts(cases)
        missed = "; ".join(f"{r['case']} {r['error_pct']:+.1f} %{_miss(r)}" for r in cases
                           if _miss(r))
        out.append(f"| {names[which]} | {fam} | {RECORDER[rec]} | {within} of {len(cases)} | "
                   f"{inside} of {len(cases)} | {missed or '—'} |")
    return "\n".join(out) + "\n\n"


def current_cases(rows: list[dict[str, Any]]) -> str:
    """The held-out and the development tables of the `current` recordings' cases, every
    case of each family from its one recording."""
    now = current(rows)
    out = []
    for which, title in (("held_out", "Held-out families, current"),
                         ("development", "Development families, current")):
        mine = [r for (w, fam), rec in now.items() if w == which
                for r in rows if r["set"] == which and r["family"] == fam
                and r.get("recording") == rec and r["case"] != "all"]
        if mine:  # a set none of whose families was recorded (one GPU's held-out set alone)
            out += _block(title, mine)
    return "\n".join(out + _footnotes(
        [r for r in rows if now.get((r["set"], r["family"])) == r.get("recording")])) + "\n"


def _miss(r: dict[str, Any]) -> str:
    """How a scored case missed: empty where within 10 % and inside its band."""
    within, inside = abs(r["error_pct"]) <= 10, bool(r.get("in_band"))
    if within and inside:
        return ""
    return " (in band)" if inside else " (out of band)" if within else " (NO)"


def _counts(scored: list[dict[str, Any]]) -> tuple[int, int, int]:
    """Cases within 10 %, measurements inside their band, both."""
    within = sum(abs(r["error_pct"]) <= 10 for r in scored)
    inside = sum(bool(r.get("in_band")) for r in scored)
    both = sum(abs(r["error_pct"]) <= 10 and bool(r.get("in_band")) for r in scored)
    return within, inside, both


def _block(title: str, mine: list[dict[str, Any]]) -> list[str]:
    """One set's table: its counts, then a row per case."""
    scored = [r for r in mine if "error_pct" in r]
    within, inside, both = _counts(scored)
    refused = sum(1 for r in mine if "error_pct" not in r)
    # the cases whose source ran at its profiled pace in the rounds (not ³): where a
    # prediction made at that pace can be held to its measurement
    paced = [r for r in scored if r.get("pace_matched") is not False]
    p_within, _, p_both = _counts(paced)
    paced_note = "" if len(paced) == len(scored) else (
        f"; of the {len(paced)} measured at their source's profiled pace, "
        f"{p_within} within 10 % and {p_both} both")
    out = [f"**{title}** ({within} of {len(scored)} cases within 10 %, {inside} "
           f"measurements inside their band; {both} both" + paced_note
           + (f"; {refused} refused or not recorded" if refused else "") + "):", "",
           "| family | case | recorder | predicted | band | measured | error |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in mine:
        rec = RECORDER.get(str(r.get("recording")), str(r.get("recording", "")))
        if "measured_fresh" in r and not r["measured_fresh"]:
            rec += " ²"  # timed in the process that had profiled
        if r.get("pace_matched") is False:
            rec += " ³"  # the source never ran at its profiled pace
        meas = _num(r["measured"]) if r.get("measured") else "not measured"
        if "predicted" in r:
            pred, band = _num(r["predicted"]), f"{_num(r['low'])}–{_num(r['high'])}"
        else:
            pred, band = "refused", ""
        if "error_pct" in r:
            err = f"**{r['error_pct']:+.1f} %**{_miss(r)}"
        else:
            err = str(r.get("refused") or r.get("error", "?"))[:100].replace("|", "/")
        out.append(f"| {r['family']} | {r['case']} | {rec} | {pred} | {band} | {meas} | "
                   f"{err} |")
    out.append("")
    return out


def _rates(rates: dict[str, Any]) -> str:
    """A rates run's figures, without the run id they came from."""
    return "; ".join(m[1] for b in rates.get("basis", [])
                     if (m := re.search(r"\((matmul [^)]*)\)", b)))


def show(results: Path, every: bool = False) -> int:
    """The tables of a compare's results.json (the published one: the recorded zoo's): the
    current evidence (`current`), its description (`about_current`, else `about`) and its
    recordings' rates and timing controls; `every`: each recording's own tables as published,
    with the description of them all."""
    try:
        doc = json.loads(results.read_text())
        rows = doc["rows"]
    except (OSError, ValueError, KeyError) as exc:
        print(f"table: {results}: not a compare's results.json ({exc})", file=sys.stderr)
        return 2
    controls = doc.get("controls", [])
    now = current(rows)
    # one recording's results (a compare's own) are all current
    every = every or len({r.get("recording") for r in rows}) < 2
    if not every:
        used = {(fam, rec) for (_, fam), rec in now.items()}
        controls = [c for c in controls if (c["family"], c.get("recording")) in used]
    about = doc.get("about") if every else doc.get("about_current", doc.get("about"))
    if about:
        rates = doc.get("rates", {})
        # one recording's rates, or each recording's (recording → rates) where it holds several
        each = {"": rates} if "basis" in rates else {
            k: r for k, r in rates.items() if every or k in set(now.values())}
        said = [f"Rates{f', {RECORDER.get(k, k)} recording' if k else ''}: {figures}."
                for k, r in each.items() if (figures := _rates(r))]
        print(" ".join([f"{about}.", *said]) + "\n")
    tables = table(rows) if every else current_cases(rows)
    print(current_table(rows) + tables + control_table(controls), end="")
    return 0

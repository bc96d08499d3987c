"""Alert rules in Prometheus's rule-file format, evaluated in-process (`gpuaudit monitor --rules`).

The same file goes to a real Prometheus unchanged. Without one, this module loads it (errors
name file, line and rule) and evaluates it over the series our exporter exposes
(`metrics.series`), with the PromQL subset of `promql` and the templates of `templates`, and with
Prometheus's `for:` / `keep_firing_for:` semantics, so a rule behaves the same wherever it runs:
`for:` counts from the first evaluation that returned the label set; an evaluation that does not
return it drops a pending alert and resolves a firing one.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

import yaml

from gpuaudit.errors import BadInputError
from gpuaudit.model import Alert
from gpuaudit.reading import read_text

from .metrics import Series, metric_names
from .promql import (
    NAME,
    EvalError,
    ExprError,
    Labels,
    Node,
    Vector,
    evaluate,
    parse_duration,
    parse_expr,
    selectors,
)
from .templates import Template, parse_template

SHIPPED_RULES = "alerts.yml"


def shipped_rules_path() -> Path:
    """gpuaudit's own rule file (`gpuaudit/data/alerts.yml`)."""
    return Path(str(resources.files("gpuaudit") / "data" / SHIPPED_RULES))


# --- rule files --------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    name: str
    group: str
    expr: str
    node: Node = field(repr=False)
    for_s: float = 0.0
    keep_firing_for_s: float = 0.0
    labels: tuple[tuple[str, Template], ...] = ()
    annotations: tuple[tuple[str, Template], ...] = ()
    where: str = ""  # "file:line" of the rule, for messages


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    source: str = ""

    def range_by_metric(self) -> dict[str, float]:
        """The longest range each metric is read over: what the evaluator must remember."""
        ranges: dict[str, float] = {}
        for rule in self.rules:
            for sel in selectors(rule.node):
                if sel.range_s is not None:
                    ranges[sel.name] = max(ranges.get(sel.name, 0.0), sel.range_s)
        return ranges

    def unknown_metrics(self, known: Iterable[str] | None = None) -> tuple[str, ...]:
        """One line per rule that reads a metric gpuaudit does not export: in-process such a
        rule can never fire (in Prometheus it may read another exporter's)."""
        names = set(metric_names() if known is None else known)
        out: list[str] = []
        for rule in self.rules:
            missing = sorted({s.name for s in selectors(rule.node)} - names)
            out.extend(f"{rule.where}: rule {rule.name}: metric {m!r} is not one gpuaudit "
                       "exports" for m in missing)
        return tuple(out)


_NULL = "tag:yaml.org,2002:null"  # YAML's null, written or left empty
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_GROUP_KEYS = {"name", "interval", "rules", "labels", "limit", "query_offset"}
_RULE_KEYS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}


class _FileError(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _mapping(node: yaml.Node, what: str, allowed: set[str]) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise _FileError(_line(node), f"{what} must be a mapping")
    out: dict[str, yaml.Node] = {}
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            raise _FileError(_line(key), f"keys in {what} must be strings")
        if key.value in out:
            raise _FileError(_line(key), f"field {key.value!r} given twice in {what}")
        if key.value not in allowed:
            raise _FileError(_line(key), f"unknown field {key.value!r} in {what} (known: "
                                         f"{', '.join(sorted(allowed))})")
        out[key.value] = value
    return out


def _scalar(node: yaml.Node | None, what: str) -> str:
    if node is None:
        return ""
    if not isinstance(node, yaml.ScalarNode):
        raise _FileError(_line(node), f"{what} must be a string")
    return "" if node.tag == _NULL else node.value


def _string_map(node: yaml.Node | None, what: str) -> list[tuple[str, str, int]]:
    if node is None or (isinstance(node, yaml.ScalarNode)
                        and node.tag == _NULL):
        return []
    if not isinstance(node, yaml.MappingNode):
        raise _FileError(_line(node), f"{what} must be a mapping")
    out = []
    seen = set()
    for key, value in node.value:
        name = _scalar(key, f"{what} name")
        if not _LABEL_NAME.match(name) or name == NAME:
            raise _FileError(_line(key), f"invalid {what} name {name!r}")
        if name in seen:
            raise _FileError(_line(key), f"{what} {name!r} given twice")
        seen.add(name)
        out.append((name, _scalar(value, f"{what} {name!r}"), _line(value)))
    return out


def _duration(node: yaml.Node | None, what: str) -> float:
    text = _scalar(node, what)
    if not text:
        return 0.0
    try:
        return parse_duration(text)
    except ValueError as exc:
        assert node is not None
        raise _FileError(_line(node), f"bad '{what}' duration {text!r}: {exc}") from None


def _expr_line(node: yaml.Node, text: str, pos: int) -> int:
    """The file line of offset `pos` in an expression: exact for a literal block (|), the
    value's first line otherwise (folded text has lost its line breaks)."""
    if isinstance(node, yaml.ScalarNode) and node.style == "|":
        return _line(node) + 1 + text.count("\n", 0, pos)
    return _line(node)


def _templates(items: list[tuple[str, str, int]], what: str) -> tuple[tuple[str, Template], ...]:
    out = []
    for name, text, line in items:
        try:
            out.append((name, parse_template(text)))
        except ValueError as exc:
            raise _FileError(line, f"{what} {name!r}: {exc}") from None
    return tuple(out)


def _peek_name(node: yaml.Node) -> str:
    """The rule's name before its fields are checked, so that every error can name it."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value in ("alert", "record") \
                    and isinstance(value, yaml.ScalarNode) and value.value:
                return value.value
    return ""


def _rule(node: yaml.Node, group: str, index: int, source: str) -> Rule:
    name = _peek_name(node)
    label = name or f"#{index + 1} of group {group!r}"
    try:
        fields = _mapping(node, "rule", _RULE_KEYS)
        if "record" in fields:
            raise _FileError(_line(fields["record"]), "recording rules are not supported "
                             "in-process (Prometheus itself can load this file)")
        if not name:
            raise _FileError(_line(node), "one of 'alert' or 'record' must be set")
        expr_node = fields.get("expr")
        expr = _scalar(expr_node, "expr").strip()
        if expr_node is None or not expr:
            raise _FileError(_line(node if expr_node is None else expr_node),
                             "field 'expr' must be set in rule")
        try:
            tree = parse_expr(expr)
        except ExprError as exc:
            raise _FileError(_expr_line(expr_node, expr, exc.pos), str(exc)) from None
        if tree.type == "matrix":
            raise _FileError(_line(expr_node), "the expression gives a range vector; an alert "
                             "needs an instant vector (e.g. max_over_time(x[5m]) > 1)")
        return Rule(
            name=name, group=group, expr=expr, node=tree,
            for_s=_duration(fields.get("for"), "for"),
            keep_firing_for_s=_duration(fields.get("keep_firing_for"), "keep_firing_for"),
            labels=_templates(_string_map(fields.get("labels"), "label"), "label"),
            annotations=_templates(_string_map(fields.get("annotations"), "annotation"),
                                   "annotation"),
            where=f"{source}:{_line(node)}")
    except _FileError as exc:
        raise BadInputError(f"{source}:{exc.line}: rule {label}: {exc}") from None


def _group(node: yaml.Node, source: str, seen: set[str]) -> list[Rule]:
    fields = _mapping(node, "group", _GROUP_KEYS)
    name = _scalar(fields.get("name"), "group name")
    if not name:
        raise _FileError(_line(node), "group name must not be empty")
    if name in seen:
        raise _FileError(_line(fields["name"]), f"group {name}: name repeated in the file")
    seen.add(name)
    try:
        _duration(fields.get("interval"), "interval")
        for key in ("limit", "query_offset"):
            if key in fields and _scalar(fields[key], key) not in ("", "0"):
                raise _FileError(_line(fields[key]), f"{key!r} is not supported in-process")
        group_labels = _templates(_string_map(fields.get("labels"), "label"), "label")
        rules_node = fields.get("rules")
        if rules_node is None or (isinstance(rules_node, yaml.ScalarNode)
                                  and not rules_node.value):
            return []
        if not isinstance(rules_node, yaml.SequenceNode):
            raise _FileError(_line(rules_node), "rules must be a list")
    except _FileError as exc:
        raise _FileError(exc.line, f"group {name}: {exc}") from None
    rules = [_rule(r, name, i, source) for i, r in enumerate(rules_node.value)]
    if not group_labels:
        return rules
    # Group labels (Prometheus 3) apply to every rule of the group; the rule's own label wins.
    return [replace(r, labels=tuple({**dict(group_labels), **dict(r.labels)}.items()))
            for r in rules]


def parse_rules(text: str, source: str = "<rules>") -> RuleSet:
    """A rule file's text → RuleSet; BadInputError "FILE:LINE: rule NAME: what is wrong"."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise BadInputError(f"{source}: YAML nested too deeply to read") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInputError(f"{source}:{line}: not valid YAML: {problem}") from None
    if root is None:
        return RuleSet((), source)
    try:
        top = _mapping(root, "the rule file", {"groups"})
        groups = top.get("groups")
        if groups is None or (isinstance(groups, yaml.ScalarNode) and not groups.value):
            return RuleSet((), source)
        if not isinstance(groups, yaml.SequenceNode):
            raise _FileError(_line(groups), "groups must be a list")
        seen: set[str] = set()
        rules: list[Rule] = []
        for g in groups.value:
            rules.extend(_group(g, source, seen))
    except _FileError as exc:
        raise BadInputError(f"{source}:{exc.line}: {exc}") from None
    return RuleSet(tuple(rules), source)


def load_rules(path: Path | str) -> RuleSet:
    """Read and check a rule file; BadInputError names the file, line and rule."""
    return parse_rules(read_text(path, "rule file"), str(path))


def load_shipped_rules() -> RuleSet:
    path = shipped_rules_path()
    return parse_rules(path.read_text(encoding="utf-8"), SHIPPED_RULES)


# --- the evaluator -----------------------------------------------------------------------

@dataclass(frozen=True)
class Transition:
    """An alert that started firing, or stopped (then `alert` is its last firing record)."""

    kind: str  # "firing" or "resolved"
    alert: Alert
    at: datetime


@dataclass(frozen=True)
class Evaluation:
    time: datetime
    alerts: tuple[Alert, ...]  # pending and firing, after this evaluation
    transitions: tuple[Transition, ...]
    errors: tuple[str, ...] = ()  # rules that could not be evaluated this time (state kept)

    @property
    def firing(self) -> tuple[Alert, ...]:
        return tuple(a for a in self.alerts if a.state == "firing")


@dataclass(frozen=True)
class _Active:
    alert: Alert
    keep_since: datetime | None = None  # when a firing alert's expression stopped returning it


def _index(series: Iterable[Series]) -> dict[str, Vector]:
    by_name: dict[str, dict[Labels, float]] = {}
    for s in series:
        # An empty label value is the same as no label, as in Prometheus.
        labels = tuple(sorted([(NAME, s.name), *((k, v) for k, v in s.labels if v != "")]))
        by_name.setdefault(s.name, {})[labels] = s.value
    return {name: list(d.items()) for name, d in by_name.items()}


class Evaluator:
    """Evaluates a RuleSet each time it is fed one tick's series. It remembers, per metric
    read over a range, only the points inside the longest such range (bounded memory), and
    the pending and firing alerts."""

    def __init__(self, rules: RuleSet) -> None:
        self.rules = rules
        self._ranges = rules.range_by_metric()
        self._history: dict[str, dict[Labels, deque[tuple[float, float]]]] = {}
        self._active: list[dict[Labels, _Active]] = [{} for _ in rules.rules]
        self._last: datetime | None = None

    @property
    def alerts(self) -> tuple[Alert, ...]:
        return _sorted(a.alert for active in self._active for a in active.values())

    def evaluate(self, at: datetime, series: Iterable[Series]) -> Evaluation:
        errors: list[str] = []
        if self._last is not None and at <= self._last:
            # The clock went back (or a replay restarted): old windows would mix two timelines.
            self._history.clear()
            errors.append(f"evaluation time {at.isoformat()} is not after the previous one: "
                          "range history cleared")
        self._last = at
        t = at.timestamp()
        now = _index(series)
        self._remember(t, now)
        transitions: list[Transition] = []
        for i, rule in enumerate(self.rules.rules):
            try:
                found = _alerts_of(rule, evaluate(rule.node, t, now, self._history))
            except EvalError as exc:
                errors.append(f"{rule.where}: rule {rule.name}: {exc}")
                continue
            transitions.extend(_advance(rule, self._active[i], found, at))
        return Evaluation(at, self.alerts, tuple(transitions), tuple(errors))

    def _remember(self, t: float, now: Mapping[str, Vector]) -> None:
        for name, keep_s in self._ranges.items():
            hist = self._history.setdefault(name, {})
            for labels, value in now.get(name, ()):
                hist.setdefault(labels, deque()).append((t, value))
            cutoff = t - keep_s
            for labels in list(hist):
                points = hist[labels]
                while points and points[0][0] <= cutoff:
                    points.popleft()
                if not points:
                    del hist[labels]  # a series gone for longer than any range: forget it


def _sorted(alerts: Iterable[Alert]) -> tuple[Alert, ...]:
    return tuple(sorted(alerts, key=lambda a: (a.name, sorted(a.labels.items()))))


_Found = dict[Labels, tuple[float, dict[str, str], dict[str, str]]]


def _alerts_of(rule: Rule, vector: Vector) -> _Found:
    """The alerts a rule's result asks for: identity labels → (value, labels, annotations)."""
    found: _Found = {}
    for labels, value in vector:
        data = dict(labels)  # what templates see as $labels (the result's own labels)
        alert_labels = {k: v for k, v in labels if k != NAME}
        alert_labels.update({k: t.render(data, value) for k, t in rule.labels})
        alert_labels["alertname"] = rule.name
        key = tuple(sorted(alert_labels.items()))
        if key in found:
            raise EvalError("vector contains metrics with the same labelset after applying "
                            "alert labels")
        annotations = {k: t.render(data, value) for k, t in rule.annotations}
        found[key] = (value, alert_labels, annotations)
    return found


def _advance(rule: Rule, active: dict[Labels, _Active], found: _Found,
             at: datetime) -> list[Transition]:
    """Prometheus's AlertingRule.Eval state machine for one rule at time `at`."""
    out: list[Transition] = []
    for key, (value, labels, notes) in found.items():
        cur = active.get(key)
        if cur is None:
            active[key] = _Active(Alert(name=rule.name, state="pending", labels=labels,
                                        annotations=notes, value=value, active_since=at))
        else:
            alert = cur.alert.model_copy(update={"value": value, "annotations": notes})
            active[key] = _Active(alert)
    for key in list(active):
        cur = active[key]
        if key not in found:
            if cur.alert.state == "firing" and rule.keep_firing_for_s > 0:
                since = cur.keep_since or at
                if at - since < timedelta(seconds=rule.keep_firing_for_s):
                    active[key] = replace(cur, keep_since=since)
                    continue
            del active[key]
            if cur.alert.state == "firing":
                out.append(Transition("resolved", cur.alert, at))
            continue
        if cur.alert.state == "pending" and \
                at - cur.alert.active_since >= timedelta(seconds=rule.for_s):
            fired = cur.alert.model_copy(update={"state": "firing", "fired_at": at})
            active[key] = _Active(fired)
            out.append(Transition("firing", fired, at))
    return out

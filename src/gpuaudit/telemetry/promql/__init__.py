"""The subset of PromQL that alert rules may use (docs/monitor-rules.md): the syntax tree
(`syntax`), the lexer and parser (`parser.parse_expr`) and evaluation over in-memory series
(`evaluate.evaluate`).

Semantics kept from Prometheus (2.42 and 3.x), so that a rule tested here means the same there:
- An instant selector sees the series fed at this evaluation only: a series the sampler no
  longer yields is gone at once, as Prometheus's staleness markers make it after a scrape.
- A range selector `[d]` sees the samples in (t-d, t] (left-open, as in Prometheus 3; 2.x also
  took a sample exactly at t-d).
- rate/increase/delta extrapolate to the window's edges exactly as Prometheus does.
"""

from .evaluate import History, evaluate
from .parser import parse_expr
from .syntax import (
    NAME,
    EvalError,
    ExprError,
    Labels,
    Matrix,
    Node,
    Points,
    Vector,
    parse_duration,
    selectors,
)

__all__ = ["NAME", "EvalError", "ExprError", "History", "Labels", "Matrix", "Node", "Points",
           "Vector", "evaluate", "parse_duration", "parse_expr", "selectors"]

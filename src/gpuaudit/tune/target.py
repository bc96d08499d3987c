"""What `tune` trains: a model, a batch maker and a loss (the `Target` protocol).

The model entry point `pkg.module:build` is the workloads package's
(`gpuaudit.workloads.entry.load`, shared by `bench train`, `tune` and `doctor`), as are the
reference models by name (`gpuaudit.workloads.models.build`, e.g. gpt-124m). Until that
package is on this branch, `load` falls back to a minimal reading of the same interface:
`build()` returns `(model, make_batch[, loss])` or a dict with those keys;
`make_batch(n)` returns `(inputs, target)` with `inputs` a tuple for `model(*inputs)`.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gpuaudit.errors import BadInputError


class Target(Protocol):
    name: str
    model: Any  # torch.nn.Module
    make_batch: Callable[[int], Any]
    loss: Callable[[Any, Any], Any] | None


@dataclass
class SimpleTarget:
    name: str
    model: Any
    make_batch: Callable[[int], Any]
    loss: Callable[[Any, Any], Any] | None = None


def load(spec: str, device: Any = None) -> Target:
    """The target named by `spec`: an entry point `pkg.module:build` or a reference model."""
    try:
        from gpuaudit.workloads import models as wl_models  # the workloads package
    except ImportError:
        wl_models = None
    if wl_models is not None:
        wl_models.check_model(spec)
        return wl_models.build(spec, device or "cpu")  # type: ignore[no-any-return]
    if ":" not in spec:
        raise BadInputError(f"--model {spec!r}: expected pkg.module:function (reference models "
                            "by name come with the workloads package)")
    return _load_entry(spec)


def _load_entry_callable(spec: str, option: str = "--model") -> Callable[[], Any]:
    """The function named by `pkg.module:function`, imported (bad input when it cannot be)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise BadInputError(f"{option} {spec!r}: expected pkg.module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # a module may raise anything on import, SystemExit too
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise BadInputError(f"{option} {spec}: cannot import {module_name}: "
                            f"{type(exc).__name__}: {_line(exc)}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise BadInputError(f"{option} {spec}: {module_name} has no function {attr!r}")
    return fn  # type: ignore[no-any-return]


def _load_entry(spec: str) -> SimpleTarget:
    build = _load_entry_callable(spec)
    try:
        made = build()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise BadInputError(f"--model {spec}: build() failed: {type(exc).__name__}: "
                            f"{_line(exc)}") from None
    if isinstance(made, dict) and "model" in made and "make_batch" in made:
        return SimpleTarget(spec, made["model"], made["make_batch"], made.get("loss"))
    if isinstance(made, tuple | list) and len(made) in (2, 3):
        return SimpleTarget(spec, made[0], made[1], made[2] if len(made) == 3 else None)
    raise BadInputError(f"--model {spec}: build() must return (model, make_batch[, loss]) or "
                        f"a dict with model and make_batch, not {type(made).__name__}")


def split_batch(batch: Any) -> tuple[tuple[Any, ...], Any]:
    """(inputs, target) from what make_batch returned."""
    if isinstance(batch, tuple | list) and len(batch) == 2 and isinstance(batch[0], tuple | list):
        return tuple(batch[0]), batch[1]
    if isinstance(batch, tuple | list):
        return tuple(batch), None
    return (batch,), None


def default_loss(output: Any, target: Any) -> Any:
    import torch.nn.functional as F

    if isinstance(output, tuple | list):
        output = output[0]
    if output.dim() == 0:
        return output
    if target is None:
        return output.float().mean()
    if not target.is_floating_point() and output.dim() >= 2:
        return F.cross_entropy(output.flatten(0, -2).float(), target.flatten())
    return F.mse_loss(output.float(), target.float())


def _line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else "no message"

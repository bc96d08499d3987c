"""The user's model as an entry point: `pkg.module:build`, shared by `bench train|infer`,
`tune` and `predict --model`.

`build()` takes no arguments and returns one of:

- `(model, make_batch)` or `(model, make_batch, loss)`;
- a dict with keys `model`, `make_batch` and optionally `loss`, `batch_size`,
  `tokens_per_sample`, `name`;
- a `Workload`.

`model` is a `torch.nn.Module`. `make_batch(batch_size)` makes synthetic data (anywhere,
tensors or NumPy arrays: gpuaudit moves it to the device) as `(inputs, target)`, where
`inputs` is a tuple of arguments for `model(*inputs)` and `target` may be None; `(x, y)`
with one tensor first is the input and its target where the model's forward needs one
positional argument (two inputs where it needs two), and `(a, b, y)` likewise where it needs
two; a bare tensor or another tuple is taken as the inputs. The inputs may also be a
mapping, as a Hugging Face batch is: `model(**inputs)` where its keys bind to the forward's
parameters, else the mapping as the one argument. `loss(output, target)` gives the scalar to
back-propagate; without it (of the output's first tensor, or a mapping's or a dataclass's
`loss` or `logits`, or the sum of a mapping of scalar losses): the output itself when it is
a scalar, cross-entropy when the target holds class indices (classes in the last dimension,
or in the second as torch's `(N, C, d1, …)` where the target's shape says so), mean squared
error against a floating target, else the mean of the output.

Anything that goes wrong before the model exists (the module cannot be imported, the function
is missing, build() fails or returns something else) is bad input: one line, exit 2.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpuaudit.errors import BadInputError
from gpuaudit.torchload import wait_preloaded

_SPEC = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


@dataclass
class Workload:
    name: str
    model: Any  # torch.nn.Module
    make_batch: Callable[[int], Any]
    loss: Callable[[Any, Any], Any] | None = None
    batch_size: int = 32
    tokens_per_sample: int | None = None  # tokens/s = samples/s × this (language models)
    # Model FLOPs of one sample (training, forward): from a formula for the reference models;
    # None: counted with FlopCounterMode.
    train_flops_per_sample: int | None = None
    forward_flops_per_sample: int | None = None
    flops_source: str = "FlopCounterMode"
    # What FlopCounterMode should count for one training sample (the cross-check's reference).
    expected_count_per_sample: int | None = None
    image_model: bool = False  # convolutional, takes NCHW images (channels_last applies)
    uses_linear: bool = True  # fp8/int8 inference replace nn.Linear layers
    params: dict[str, str | int | float | bool | None] | None = None  # shown in the record


def is_entry_point(text: str) -> bool:
    return ":" in text


def resolve(spec: str, option: str = "--model") -> Callable[[], Any]:
    """The function named by `pkg.module:function` (imported, not called); `option` names
    what the user typed it into, for the one-line error."""
    if not _SPEC.match(spec) or spec.partition(":")[0].endswith(".py"):
        raise BadInputError(f"{option} {spec!r}: expected pkg.module:function{_as_module(spec)}")
    module_name, _, attr = spec.partition(":")
    # As `python -m` does: modules in the current directory can be named.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    wait_preloaded()
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # a module may raise anything, SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise BadInputError(f"{option} {spec}: cannot import {module_name}: "
                            f"{type(exc).__name__}: {_first_line(exc)}") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise BadInputError(f"{option} {spec}: {module_name} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise BadInputError(f"{option} {spec}: {attr} is not callable")
    return target


def _as_module(spec: str) -> str:
    """For a file's path typed where a module is named (`./models.py:build`): the module's
    name to type, run from the file's folder."""
    path, _, attr = spec.rpartition(":")
    if not path.endswith(".py") or not re.fullmatch(r"[A-Za-z_][\w.]*", attr):
        return ""
    folder, name = os.path.split(path[:-3])
    where = f"from {folder or '.'} (or with it on PYTHONPATH)" if folder.strip("./") else \
        "from its folder"
    return f", a module's name, not a file's: {name}:{attr} {where}"


@contextlib.contextmanager
def user_code(what: str) -> Iterator[None]:
    """Around a call into the user's code (their build function, model, dataset): whatever it
    raises (an OSError from a missing data folder, a TypeError in forward, SystemExit) is
    bad input naming `what` and the exception, in one line, exit 2; never a traceback, and
    never taken for one of gpuaudit's own failures. Ctrl-C stays Ctrl-C."""
    try:
        yield
    except (KeyboardInterrupt, BadInputError):
        raise
    except BaseException as exc:  # a user's code may raise anything, SystemExit included
        name = type(exc).__name__
        said = _first_line(exc).removeprefix(f"{name}: ")
        raise BadInputError(f"{what} failed: {name}: {said}") from None


def load(spec: str) -> Workload:
    """Import `pkg.module:build`, call it, and return the Workload it describes."""
    build = resolve(spec)
    with user_code(f"--model {spec}: build()"):
        made = build()
    return as_workload(made, spec)


def as_workload(made: Any, name: str) -> Workload:
    if isinstance(made, Workload):
        return made
    if isinstance(made, dict):
        unknown = set(made) - {"model", "make_batch", "loss", "batch_size", "tokens_per_sample",
                               "name"}
        if unknown or "model" not in made or "make_batch" not in made:
            raise BadInputError(f"--model {name}: build() returned a dict without model and "
                                f"make_batch" + (f" (unknown keys {sorted(unknown)})"
                                                 if unknown else ""))
        w = Workload(name=str(made.get("name", name)), model=made["model"],
                     make_batch=made["make_batch"], loss=made.get("loss"),
                     batch_size=int(made.get("batch_size", 32)),
                     tokens_per_sample=made.get("tokens_per_sample"))
    elif isinstance(made, tuple | list) and len(made) in (2, 3):
        w = Workload(name=name, model=made[0], make_batch=made[1],
                     loss=made[2] if len(made) == 3 else None)
    else:
        raise BadInputError(f"--model {name}: build() must return (model, make_batch[, loss]), "
                            f"a dict or a Workload, not {type(made).__name__}")
    if not callable(getattr(w.model, "parameters", None)) or not callable(w.model):
        raise BadInputError(f"--model {name}: the model is not a torch.nn.Module")
    if not callable(w.make_batch) or (w.loss is not None and not callable(w.loss)):
        raise BadInputError(f"--model {name}: make_batch and loss must be callables")
    if w.batch_size < 1:
        raise BadInputError(f"--model {name}: batch_size must be at least 1")
    _uncompiled(w)
    return w


def _uncompiled(w: Workload) -> None:
    """A model build() compiled, whole or in parts (`torch.compile(model)`,
    `model.compile()`, a block compiled in place or replaced by its compiled wrapper, as
    per-block compilation does), runs eager: the modes say what is compiled (`+compile`),
    and an eager mode's operators are what the op profile classes and times alone (a
    compiled region is one opaque node, its backward too). Its params say so. A function
    the user's module decorated with `torch.compile` cannot be reached from here (torch's
    FlopCounterMode turns it back to eager after the first warm-up: docs/workloads.md)."""
    found = _eager_in_place(w.model)
    orig = getattr(w.model, "_orig_mod", None)
    if orig is not None and type(w.model).__name__ == "OptimizedModule":
        w.model = orig
        found = True
    if found:
        w.params = {**(w.params or {}),
                    "compiled_in_build": "run eager; the +compile modes compile it"}


def _eager_in_place(model: Any) -> bool:
    """Undo `compile()` on every submodule and unwrap every compiled child; whether any was."""
    found = False
    modules = getattr(model, "modules", None)
    for module in list(modules()) if callable(modules) else []:
        if getattr(module, "_compiled_call_impl", None) is not None:
            module._compiled_call_impl = None
            found = True
        for name, child in list(getattr(module, "_modules", {}).items()):
            orig = getattr(child, "_orig_mod", None)
            if orig is not None and type(child).__name__ == "OptimizedModule":
                module._modules[name] = orig
                found = True
    return found


_RAISED = re.compile(r"^[A-Z]\w*(Error|Exception|Exit|Interrupt)\b")


def raised(skipped_reason: str | None) -> bool:
    """Whether a mode was skipped because the user's code raised (the reason starts with the
    exception's name), not for memory or a precision the GPU lacks."""
    return bool(_RAISED.match(skipped_reason or ""))


def failed_entry_points(specs: list[str], measured: Any) -> str | None:
    """The user's entry points (`pkg.module:build`) none of whose modes ran because their code
    raised (not for memory, not for a precision the GPU lacks): one line naming the first
    and what it raised. A bench keeps its other figures; this says whose code failed."""
    for spec in (s for s in specs if is_entry_point(s)):
        mine = [m for m in measured if m.name.startswith(f"{spec}/")]
        failed = [m for m in mine if m.skipped and raised(m.skipped_reason)]
        if mine and failed and all(m.skipped for m in mine):
            # which mode said it: a model that fails under autocast alone fails in bf16
            mode = failed[0].name[len(spec) + 1:].split("/")[0]
            return (f"--model {spec}: the model failed in every mode "
                    f"({mode}: {failed[0].skipped_reason})")
    return None


def split_batch(batch: Any, model: Any = None) -> tuple[tuple[Any, ...], Any]:
    """(inputs, target) from what make_batch returned (see the module doc); a mapping of
    inputs stays one input (`takes_keywords` says how the model takes it). A pair whose first
    item is one tensor, `(x, y)` as a data loader yields it, is the input and its target
    where the model's forward needs fewer than two positional arguments; without the model,
    or where its forward needs two, the pair is the inputs. Likewise a flat tuple of n items,
    `src, tgt, labels`, is n − 1 inputs and a target where the forward needs n − 1."""
    if isinstance(batch, tuple | list) and len(batch) == 2:
        if isinstance(batch[0], tuple | list):
            return tuple(batch[0]), batch[1]
        if isinstance(batch[0], Mapping):
            return (batch[0],), batch[1]
        needs = _positional_needed(model)
        if needs is not None and needs < 2:
            return (batch[0],), batch[1]
    if isinstance(batch, tuple | list) and len(batch) > 2 and \
            _positional_needed(model) == len(batch) - 1:
        return tuple(batch[:-1]), batch[-1]  # `src, tgt, labels`: the last is the target
    if isinstance(batch, tuple | list):
        return tuple(batch), None
    return (batch,), None


def _positional_needed(model: Any) -> int | None:
    """How many positional arguments the model's forward needs (none without a default);
    None where it has no readable signature."""
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError, AttributeError):
        return None
    return sum(p.default is p.empty for p in params
               if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def takes_keywords(model: Any, inputs: tuple[Any, ...]) -> bool:
    """Whether the inputs are the model's keyword arguments, `model(**inputs[0])`, as a
    Hugging Face model takes its batch: they are one mapping that binds to the forward's
    signature. A forward that takes the mapping whole (`forward(self, batch)`) gets it so."""
    if len(inputs) != 1 or not isinstance(inputs[0], Mapping):
        return False
    try:
        inspect.signature(model.forward).bind(**inputs[0])
    except (TypeError, ValueError, AttributeError):
        return False
    return True


def call_model(model: Any, inputs: tuple[Any, ...], keywords: bool) -> Any:
    return model(**inputs[0]) if keywords else model(*inputs)


def _first_output(output: Any) -> Any:
    """The tensor a loss is taken of: the first of a tuple or list; of a mapping (a Hugging
    Face model's output), its `loss` where it computed one, else its `logits`, else the sum
    of its values where all are scalars (a torchvision detector's losses, summed as its
    reference training does), else its first value. A dataclass reads as the mapping of its
    fields."""
    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        output = {f.name: getattr(output, f.name) for f in dataclasses.fields(output)}
    if isinstance(output, Mapping):
        for key in ("loss", "logits"):
            if output.get(key) is not None:
                return output[key]
        values = list(output.values())
        if values and all(getattr(v, "ndim", None) == 0 for v in values):
            return sum(values[1:], values[0])
        return _first_output(next(iter(values), None))
    if isinstance(output, tuple | list) and output:
        return _first_output(output[0])
    return output


def default_loss(output: Any, target: Any) -> Any:
    import torch
    import torch.nn.functional as F

    if target is None and isinstance(output, tuple | list):
        # `logits, loss = model(x, y)`, as nanoGPT and minGPT return them: the loss the model
        # took is the one scalar (with a target given, a scalar beside the logits is more
        # likely an auxiliary term, and the target's loss is taken of the logits)
        scalars = [o for o in output if isinstance(o, torch.Tensor) and o.dim() == 0
                   and o.is_floating_point()]
        if len(scalars) == 1:
            return scalars[0]
    output = _first_output(output)
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"the default loss needs a tensor output, not {type(output).__name__}: "
                        "return a loss(output, target) from build()")
    if output.dim() == 0:
        return output
    if target is None:
        return output.float().mean()
    if not torch.is_floating_point(target) and output.dim() >= 2:
        if tuple(target.shape) != tuple(output.shape[:-1]) and \
                tuple(target.shape) == (output.shape[0], *output.shape[2:]):
            # classes in dim 1, torch's own layout (N, C, d1, …): a conv net's per-pixel or
            # per-step logits
            return F.cross_entropy(output.float(), target)
        return F.cross_entropy(output.flatten(0, -2).float(), target.flatten())
    return F.mse_loss(output.float(), target.float())


def _first_line(exc: BaseException) -> str:
    """The message's first line that says something (a DataLoader worker's error starts
    "Caught ValueError in DataLoader worker process 0."; the original follows)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if lines and lines[0].startswith("Caught ") and "DataLoader worker" in lines[0]:
        lines = lines[-1:]  # the original exception's own line ends the text
    return lines[0][:200] if lines else "no message"

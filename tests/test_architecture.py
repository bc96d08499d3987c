"""The import structure DESIGN's layers promise, read from the code by grimp (every import
statement, those inside functions and under TYPE_CHECKING too): no cycle between modules or
between packages at any depth, each layer importing only the layers below it, and only `hw`
talking to the GPU driver."""

from __future__ import annotations

import functools
import itertools
from collections import defaultdict

import pytest

grimp = pytest.importorskip("grimp")

PACKAGE = "gpuaudit"

# Highest first: a layer may import the layers after it, never one before it. Modules of one
# layer may import each other (the capabilities build on one another: `cost` on `predict`,
# `workloads` on `bench`) as long as no cycle forms, which the cycle tests hold.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli", "web", "jobwatch", "__main__"),  # the front ends: argument parsing, servers, API
    ("report",),  # records → terminal, JSON, CSV, HTML
    ("store",),
    ("audit", "compare", "bench", "cost", "diagnose", "fleet", "inspect", "predict", "telemetry",
     "tune", "workloads"),  # the capabilities: functions that return records
    ("hw",),  # the only layer that touches the hardware
    ("specs",),
    ("model",),
    # what every layer uses: errors, reading the files users name, parsing values and units
    ("errors", "reading", "parse", "percentile", "binaries", "filecache", "interrupt",
     "kernelnames", "_version"),
)
# Third-party modules that reach the GPU driver: only `gpuaudit.hw` imports them.
DRIVER_MODULES = ("pynvml",)


@functools.cache
def graph(external: bool = False) -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, include_external_packages=external, cache_dir=None)


def _edges(depth: int | None) -> dict[str, set[str]]:
    """Who imports whom, each module folded to its package `depth` levels below gpuaudit
    (None: modules as they are). Imports inside one folded node are left out."""
    def fold(name: str) -> str:
        return name if depth is None else ".".join(name.split(".")[:depth + 1])

    g = graph()
    out: dict[str, set[str]] = defaultdict(set)
    for m in g.modules:
        for w in g.find_modules_directly_imported_by(m):
            a, b = fold(m), fold(w)
            # a package's own __init__ (gpuaudit, gpuaudit.bench) sits above its members
            if a != b and not b.startswith(a + ".") and not a.startswith(b + "."):
                out[a].add(b)
    return out


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = itertools.count()
    nodes = set(edges) | {w for ws in edges.values() for w in ws}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = next(counter)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = next(counter)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def _witness(edges: dict[str, set[str]], cycle: list[str]) -> str:
    """Each import that holds the cycle together, to show in the failure."""
    members = set(cycle)
    return "; ".join(f"{a} → {b}" for a in cycle for b in sorted(edges.get(a, ())) if b in members)


def test_the_graph_sees_function_level_imports():
    """The import inside `bench.runner.bench_findings` is in the graph: the cycle tests below
    would be blind without it."""
    assert graph().direct_import_exists(importer="gpuaudit.bench.runner",
                                        imported="gpuaudit.bench.workload_findings")
    # an import that only runs inside a function
    assert graph().direct_import_exists(importer="gpuaudit.workloads.opcapture",
                                        imported="gpuaudit.workloads.trainer")


def test_every_package_is_a_package():
    """A folder without __init__.py is a namespace package, which the graph (and mypy) would
    pass over."""
    from pathlib import Path

    import gpuaudit

    root = Path(gpuaudit.__file__).parent
    bare = [str(d.relative_to(root)) for d in root.rglob("*") if d.is_dir()
            and any(d.glob("*.py")) and not (d / "__init__.py").exists()
            # sitecustomize for the watched job: put on its path, never imported as ours
            and d.name != "bootstrap"]
    assert bare == []


def test_no_module_imports_itself_back():
    edges = _edges(None)
    cycles = _cycles(edges)
    assert cycles == [], "\n".join(_witness(edges, c) for c in cycles)


@pytest.mark.parametrize("depth", [1, 2])
def test_no_package_imports_itself_back(depth):
    """gpuaudit.bench and gpuaudit.workloads (depth 1), gpuaudit.cost.recommend and
    gpuaudit.cost.catalog (depth 2): each pair one way only."""
    edges = _edges(depth)
    cycles = _cycles(edges)
    assert cycles == [], "\n".join(_witness(edges, c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_every_module_has_a_layer():
    placed = {name for layer in LAYERS for name in layer}
    top = {m.split(".")[1] for m in graph().modules if m != PACKAGE}
    assert top - placed == set(), "put the new top-level module or package in LAYERS"
    assert placed - top == set(), "LAYERS names something that is gone"


def test_layers_import_only_downwards():
    layers = [grimp.Layer(*names, independent=False) for names in LAYERS]
    broken = graph().find_illegal_dependencies_for_layers(layers=layers, containers={PACKAGE})
    lines = [f"{d.importer} must not import {d.imported}: "
             + "; ".join(f"{sorted(r.heads)} → {list(r.middle)} → {sorted(r.tails)}"
                         for r in d.routes) for d in broken]
    assert not broken, "\n".join(lines)


def test_only_hw_reaches_the_driver():
    g = graph(external=True)
    for driver in DRIVER_MODULES:
        users = sorted(m for m in g.find_modules_that_directly_import(driver)
                       if not m.startswith(f"{PACKAGE}.hw."))
        assert users == [], f"{driver} imported outside gpuaudit.hw: {users}"

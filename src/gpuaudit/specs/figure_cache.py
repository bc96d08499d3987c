"""The packaged spec catalog's figures (`gpuaudit.specs.figures`) in a few milliseconds.

`load_figures()` reads them from the parsed-file cache (`gpuaudit.filecache`), keyed on the
spec catalog file; on a miss it loads the full catalog (`gpuaudit.specs.catalog`, which checks
every figure and its source) and keeps its figures. Apart from the records, so that the
catalog (which builds on them) and this loader (which builds on the catalog) form no cycle.
"""

from __future__ import annotations

from pathlib import Path

from .figures import FigureCatalog, SpecFigures, figures_of

_LAYOUT = 1


def spec_file() -> Path:
    # Beside this module (importlib.resources would cost a fast command ~5 ms of imports).
    return Path(__file__).with_name("data") / "gpus.yaml"


def load_figures() -> FigureCatalog:
    """The packaged spec catalog's figures, from the cache while the file is unchanged."""
    global _LOADED
    if _LOADED is None:
        from gpuaudit import filecache

        def build() -> FigureCatalog:
            from .catalog import load_catalog

            return FigureCatalog(figures_of(g) for g in load_catalog().gpus)

        _LOADED = filecache.cached(
            "specs", [spec_file()], build, salt=f"figures {_LAYOUT} {_code_salt()}",
            encode=lambda cat: [tuple(getattr(g, f) for f in SpecFigures.__slots__)
                                for g in cat.gpus],
            decode=lambda rows: FigureCatalog(SpecFigures(*row) for row in rows))
    return _LOADED


def _code_salt() -> str:
    # The parsing code counts as a source: a changed loader never serves old figures.
    parts = []
    for name in ("catalog.py", "figures.py", "figure_cache.py"):
        try:
            st = (Path(__file__).parent / name).stat()
        except OSError:
            continue
        parts.append(f"{name}:{st.st_mtime_ns}:{st.st_size}")
    return ";".join(parts)


_LOADED: FigureCatalog | None = None

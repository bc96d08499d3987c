"""Loaded by every Python process that `gpuaudit doctor` starts (this folder comes first on the
job's PYTHONPATH, and children inherit it: torchrun's ranks, multiprocessing, loader workers).

It starts the doctor's bootstrap (`_gpuaudit_bootstrap`), then runs the sitecustomize that this
one hides, if there is one further on the path (Debian's, a conda environment's), as Python
would have. Nothing here may stop the job: a failure is written down and the job goes on.
"""

import os
import sys


def _bootstrap():
    try:
        import _gpuaudit_bootstrap
    except Exception:
        return
    _gpuaudit_bootstrap.install()


def _chain():
    """Run the next sitecustomize on sys.path, its names becoming this module's."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # what site.py prints for a failing sitecustomize
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                         f"{err.__class__.__name__}: {err}\n")
        return
    globals().update({k: v for k, v in vars(module).items() if not k.startswith("__")})


_bootstrap()
_chain()

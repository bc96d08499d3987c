"""gpuaudit: what a GPU server really delivers, why a job does not get it, what it costs.

The capabilities are plain functions returning `gpuaudit.model` records:

    >>> from gpuaudit import inspect_machine
    >>> run = inspect_machine()          # snapshot + health findings
    >>> run.verdict, run.machine.gpus
"""

from ._version import __version__
from .inspect import check_machine, inspect_machine, read_snapshot

__all__ = ["__version__", "check_machine", "inspect_machine", "read_snapshot"]

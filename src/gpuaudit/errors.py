"""Errors the CLI turns into a one-line message and an exit code."""

from __future__ import annotations


class GpuauditError(Exception):
    """Base of the errors gpuaudit raises on purpose. Exit code 1 unless a subclass says."""

    exit_code = 1


class BadInputError(GpuauditError):
    """The user gave something unusable: a garbled file, a bad URL, a bad option. Exit 2."""

    exit_code = 2

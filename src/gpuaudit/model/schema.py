"""Reading documents back (with one-line errors) and the published JSON Schema."""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError

from gpuaudit.errors import BadInputError
from gpuaudit.reading import load_json

from .base import SCHEMA_VERSION
from .run import Run


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a Run document (what --json prints and the store keeps)."""
    schema = Run.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://gpuaudit.dev/schema/run-v{SCHEMA_VERSION}.json"
    return schema


def recommend_json_schema() -> dict[str, Any]:
    """The JSON Schema of recommend's document (`gpuaudit recommend --json`), which carries
    its own version (`RECOMMEND_SCHEMA_VERSION`)."""
    from .recommendation import RECOMMEND_SCHEMA_VERSION, RecommendResult

    schema = RecommendResult.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://gpuaudit.dev/schema/recommend-v{RECOMMEND_SCHEMA_VERSION}.json"
    return schema


def describe_validation_error(err: ValidationError) -> str:
    """The first problem of a validation error, on one line: 'gpus.0.pcie.gen_current: ...'."""
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "document"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    given = first.get("input")
    got = f", got {given!r}" if isinstance(given, str | int | float | bool) else ""
    return f"{where}: {first['msg']}{got}{more}"


def read_run(path: str | os.PathLike[str], what: str = "run file") -> Run:
    """A Run document from a file the user named (through the one reader: a regular file,
    bounded, gzip unpacked, strict UTF-8 and JSON), or a one-line BadInputError."""
    from gpuaudit.reading import read_text

    # Strict: a figure written as text ("lots") or a list where a record was is damage.
    return load_run(read_text(path, what), origin=f"{what} {path}", strict=True)


def load_run(text: str | bytes, origin: str = "document", *, strict: bool = False,
             nan_ok: bool = False) -> Run:
    """Parse a Run document, raising BadInputError with one line when it is not one. `strict`:
    a value of the wrong JSON type is an error instead of being converted ("5" for 5).
    `nan_ok`: NaN and Infinity are read (a snapshot's machine facts; its check names them)."""
    data = load_json(text, origin, nan_ok=nan_ok)
    if not isinstance(data, dict):
        raise BadInputError(f"{origin} is not a gpuaudit document (expected a JSON object)")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise BadInputError(f"{origin} is not a gpuaudit document (no schema_version)")
    if version > SCHEMA_VERSION:
        raise BadInputError(
            f"{origin} has schema_version {version}; this gpuaudit reads up to {SCHEMA_VERSION}"
            " (upgrade gpuaudit)"
        )
    try:
        return Run.model_validate_json(text, strict=True) if strict else Run.model_validate(data)
    except ValidationError as exc:
        raise BadInputError(f"{origin} does not match the schema: "
                            f"{describe_validation_error(exc)}") from None

"""The JSON-lines check: a feed file is shipped only if Spark reads every line of it as a record, none corrupt."""

from __future__ import annotations

import json
from typing import Any

from spiderd.feed.errors import BadFeedError


def validate_jsonl(path: str) -> int:
    """The number of records of a JSON-lines file Spark reads with no corrupt record.

    Raises BadFeedError on the first bad line: invalid UTF-8, blank, not a JSON object, NaN or
    Infinity, a bare carriage return (Hadoop splits lines there), or no final newline.
    """
    count = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            _check_line(raw, number)
            count += 1
    return count


def _check_line(raw: bytes, number: int) -> None:
    if not raw.endswith(b"\n"):
        raise BadFeedError(f"line {number}: no final newline (a torn last line?)")
    body = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadFeedError(f"line {number}: invalid UTF-8 at byte {e.start}") from None
    if not text.strip():
        raise BadFeedError(f"line {number}: blank line")
    if "\r" in text:
        raise BadFeedError(f"line {number}: carriage return inside the line")
    try:
        if text.startswith("\ufeff"):  # (as json.loads says it)
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        value = _DECODER.decode(text)
    except ValueError as e:
        raise BadFeedError(f"line {number}: not JSON: {e}") from None
    if not isinstance(value, dict):
        raise BadFeedError(f"line {number}: a JSON {type(value).__name__}, not an object")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# json.loads with parse_constant makes a decoder for every call: one for every line, made once (it holds no state)
_DECODER = json.JSONDecoder(parse_constant=_no_constant)

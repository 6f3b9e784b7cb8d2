"""An item as one JSON line: the one encoding of items' lines, used by the items writers and by the parse children
(which encode the items of the pages they parse, so that the reactor's process does not).  Nothing here imports
Twisted."""

from __future__ import annotations

import json
import math
from typing import Any


def json_line(item: dict[str, Any]) -> str:
    """One JSON line; NaN and Infinity (not JSON: Spark marks the record corrupt) become null."""
    try:
        return _dumps(item)
    except ValueError as e:
        if "Out of range float" not in str(e):
            raise
        return _dumps(_finite(item))


def _dumps(item: Any) -> str:
    return _ENCODER.encode(item) + "\n"


# json.dumps with these options makes an encoder for every call: one for every line, made once (it holds no state)
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False)


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats replaced: null as values, their name as dict keys."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {(str(k) if isinstance(k, float) and not math.isfinite(k) else k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value

"""The one reading of JSON that comes from outside (a request body, an imported line, a job's setting).

``json.loads`` parses arrays and objects by recursion: ``[`` 100,000 times raises
``RecursionError``, a ``RuntimeError`` that callers catching ``ValueError`` for bad
JSON do not expect (the APIs answered 500 or 503 to it).  Here it is bad JSON too.
"""

from __future__ import annotations

import json
from typing import Any

TOO_DEEP = "nested too deeply"


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; raises ``ValueError`` for text that is not JSON, including JSON nested too deeply."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None

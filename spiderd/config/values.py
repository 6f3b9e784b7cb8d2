"""The checks every converter of the configuration is built on (and the API's numbers): a value of the expected
type, a finite number, a list of strings."""

from __future__ import annotations

import math
from typing import Any, TypeVar, overload

T = TypeVar("T")


@overload
def expect(value: object, types: type[T], what: str) -> T: ...
@overload
def expect(value: object, types: tuple[type[T], ...], what: str) -> T: ...


def expect(value: Any, types: type[Any] | tuple[type[Any], ...], what: str) -> Any:
    """``value`` if it is of ``types`` (a boolean only where ``bool`` is asked for); TypeError naming ``what``."""
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise TypeError(f"expected {what}, got {value!r}")
    if not isinstance(value, types):
        raise TypeError(f"expected {what}, got {value!r}")
    return value


MAX_SECONDS = 1e9  # about 31 years: the largest duration (or number) a setting or a request may give


def finite_number(value: Any) -> float:
    """``value`` as a float; refuses booleans, non-numbers, NaN, infinities and magnitudes over MAX_SECONDS."""
    number = float(expect(value, (int, float), "a number"))
    if not math.isfinite(number) or abs(number) > MAX_SECONDS:
        raise ValueError(f"must be a finite number of at most {MAX_SECONDS:.0e}, got {value!r}")
    return number


def strings(value: Any) -> tuple[str, ...]:
    """A list of strings, as a tuple."""
    items = expect(value, list, "a list of strings")
    for item in items:
        expect(item, str, "a list of strings")
    return tuple(items)

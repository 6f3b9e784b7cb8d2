"""A long list of URLs kept compactly: their characters in one string and their ends in an array, not an object
each.

A node's configured seeds live as long as its settings (and the seed service and the embedded pool keep them for
the seed timer): with every host a seed, as a broad crawl may start, 500,000 seeds as ``str`` objects in lists
take about 110 bytes each (the string, and a pointer in each list that holds it); here about 35 (the characters
and an end).  An item is made when it is read (a slice: a list of them), so a reader takes the URLs a slice at a
time.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload


class URLList(Sequence[str]):
    """An immutable sequence of strings (URLs), equal to any sequence of the same strings."""

    __slots__ = ("_text", "_ends")

    def __init__(self, urls: Iterable[str] = ()) -> None:
        items = urls if isinstance(urls, (list, tuple)) else list(urls)
        ends, total = array("Q"), 0
        for url in items:
            total += len(url)
            ends.append(total)
        self._text = "".join(items)
        self._ends = ends if total >= 2**32 else array("I", ends)  # 4 bytes an end below 4G characters

    @classmethod
    def of(cls, urls: Iterable[str]) -> URLList:
        """``urls`` as a URLList (itself if it is one: it never changes)."""
        return urls if isinstance(urls, URLList) else cls(urls)

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("URLList index out of range")
        return self._item(index)

    def _item(self, index: int) -> str:
        return self._text[self._ends[index - 1] if index else 0:self._ends[index]]

    def __iter__(self) -> Iterator[str]:
        text, start = self._text, 0
        for end in self._ends:
            yield text[start:end]
            start = end

    def __eq__(self, other: object) -> bool:
        if isinstance(other, URLList):
            return self._text == other._text and self._ends == other._ends
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._text, len(self)))

    def __repr__(self) -> str:
        return f"URLList({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return URLList, (list(self),)

"""An in-memory stand-in for plyvel's ``DB``: the subset the pool uses, for tests and throwaway crawls."""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from typing import Iterator


class MemoryKV:
    """An ordered dict of bytes with plyvel's ``get``, ``put``, ``delete``, ``write_batch`` and ``iterator``."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []
        self.closed = False

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        return self._data.get(key, default)

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self._data:
            insort(self._keys, key)
        self._data[key] = value

    def delete(self, key: bytes) -> None:
        if self._data.pop(key, None) is not None:
            del self._keys[bisect_left(self._keys, key)]

    def write_batch(self, sync: bool = False) -> "MemoryBatch":
        return MemoryBatch(self)

    def iterator(
        self,
        prefix: bytes | None = None,
        start: bytes | None = None,
        stop: bytes | None = None,
        include_value: bool = True,
    ) -> Iterator[bytes | tuple[bytes, bytes]]:
        """Keys in order from ``start``; the store may change between two steps (as a LevelDB snapshot would
        not, but the pool never relies on either): each step goes on after the last key yielded."""
        if prefix is not None:
            start, stop = prefix, None
        position = bisect_left(self._keys, start or b"")
        while position < len(self._keys):
            key = self._keys[position]
            if (stop is not None and key >= stop) or (prefix is not None and not key.startswith(prefix)):
                return
            yield (key, self._data[key]) if include_value else key
            position = bisect_right(self._keys, key)

    def close(self) -> None:
        self.closed = True


class MemoryBatch:
    """Buffered puts and deletes applied together by ``write``."""

    def __init__(self, kv: MemoryKV) -> None:
        self._kv = kv
        self._ops: list[tuple[bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes) -> None:
        self._ops.append((key, value))

    def delete(self, key: bytes) -> None:
        self._ops.append((key, None))

    def write(self) -> None:
        for key, value in self._ops:
            if value is None:
                self._kv.delete(key)
            else:
                self._kv.put(key, value)
        self._ops = []

"""``br`` (Brotli) response bodies, inflated with a bound, when a Brotli package that can bound its output is here.

``brotli`` (1.2 or later) or ``brotlicffi``, whichever imports first and takes ``output_buffer_limit``: older
releases inflate a whole chunk at once, so a small body could allocate without limit (a Brotli bomb), and
they are not used.  Without one, ``br`` is neither asked for (``Accept-Encoding``) nor inflated.
Install it with the ``brotli`` extra (``pip install spiderd[brotli]``).
"""

from __future__ import annotations

from typing import Any


def _module() -> Any:
    """The first Brotli module whose decompressor bounds its output, or None."""
    for name in ("brotli", "brotlicffi"):
        try:
            module = __import__(name)
            decompressor = module.Decompressor()
            decompressor.process(b"", output_buffer_limit=1)
            decompressor.can_accept_more_data()
        except Exception:  # missing, too old (TypeError, AttributeError) or broken: not used
            continue
        return module
    return None


_BROTLI = _module()
_ERROR = getattr(_BROTLI, "error", ValueError)


def available() -> bool:
    """True if ``br`` bodies can be inflated (and so may be asked for)."""
    return _BROTLI is not None


class BrotliError(ValueError):
    """A body that claims ``br`` but is not Brotli, or ends early."""


class BrotliInflater:
    """A Brotli decompressor with zlib's bounded interface: ``decompress(data, max_length)`` gives at most about
    ``max_length`` bytes (Brotli's output grows in blocks of 32 KiB: at most one block more), ``unconsumed_tail``
    is true while output is still pending past it, ``flush()`` checks the stream ended."""

    def __init__(self) -> None:
        if _BROTLI is None:
            raise RuntimeError("no Brotli module that bounds its output")
        self._inner = _BROTLI.Decompressor()
        self.unconsumed_tail = b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        try:
            out: bytes = self._inner.process(data, output_buffer_limit=max(1, max_length))
        except _ERROR as e:
            raise BrotliError(f"bad br body: {e}") from None
        self.unconsumed_tail = b"" if self._inner.can_accept_more_data() else b"pending"
        return out

    def flush(self) -> bytes:
        if not self._inner.is_finished():
            raise BrotliError("truncated br body")
        return b""

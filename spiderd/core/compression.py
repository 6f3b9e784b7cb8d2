"""Page compression for ``html_lzma``: XZ, which plain ``lzma.decompress`` reads whatever the settings.

The LZMA2 dictionary is sized to the page (at least 64 KiB) instead of the
preset's (1 MiB at preset 1, 8 MiB at 6): a dictionary larger than its input
gains nothing, and allocating one per call cost about 1 ms of system time per
page here (page faults), as much as the compression itself.  Measured on 400
generated pages of 40 KB: preset 1 took 2.43 ms per page with the preset's
dictionary and 1.38 ms with the page-sized one, for the same output.
"""

from __future__ import annotations

import lzma

MIN_DICT = 1 << 16
FAST = -1  # the "fast" preset: XZ preset 0 with a short match search (see below)
_FAST_SEARCH = {"nice_len": 8, "mf": lzma.MF_HC3}


def compress(html: bytes, preset: int) -> bytes:
    """``html`` as XZ with the given preset (0-9, or FAST) and a dictionary no larger than needed.

    FAST is preset 0 with matches searched only until one of 8 bytes is found, by 3-byte hash chains: on
    400 pages of 20-60 KB, 1.18 ms a page against preset 1's 1.34 ms, for output 2% larger (28.3% of the
    page against 27.7%); in a whole crawl storing every page, 12% more pages per second.  Any preset gives
    plain XZ: readers need nothing but ``lzma.decompress``.
    """
    dict_size = max(MIN_DICT, 1 << max(0, len(html) - 1).bit_length())
    if preset == FAST:
        options: dict[str, object] = {"preset": 0, **_FAST_SEARCH}
    else:
        options = {"preset": preset}
    filters = [{"id": lzma.FILTER_LZMA2, "dict_size": dict_size, **options}]
    return lzma.compress(html, format=lzma.FORMAT_XZ, filters=filters)


def decompress(blob: bytes) -> bytes:
    """The page of an ``html_lzma`` value."""
    return lzma.decompress(blob)

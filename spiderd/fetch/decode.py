"""A fetched page as an lxml tree: is it HTML, which charset (header, BOM, meta, a guess), and the tree.

Pure functions, no Twisted.  Hostile bodies (binary junk, lying charsets, NUL bytes) give None or a
best-effort UTF-8 text, never an exception.
"""

from __future__ import annotations

from lxml import etree
from w3lib.encoding import html_body_declared_encoding, http_content_type_encoding, read_bom

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml", "application/vnd.wap.xhtml+xml"})
_BINARY_MAGIC = (b"%PDF", b"\x89PNG", b"GIF8", b"\xff\xd8\xff", b"PK\x03\x04", b"\x1f\x8b", b"RIFF")

def is_html(content_type: str | None, body: bytes) -> bool:
    """Whether the page is HTML: its content type says so, or it has none and does not start like a binary."""
    if content_type:
        mime = content_type.partition(";")[0].strip().lower()
        if mime:
            return mime in HTML_TYPES
    return not body.startswith(_BINARY_MAGIC)


def parse_html(body: bytes, content_type: str | None) -> etree._Element | None:
    """The document's root element, or None when there is nothing lxml can make a tree of."""
    if not body or not isinstance(body, bytes):
        return None
    data = _utf8(body, content_type)
    try:
        return etree.fromstring(data, _parser())
    except (etree.ParserError, etree.XMLSyntaxError, ValueError):
        return None


def page_text(body: bytes, content_type: str | None) -> str:
    """The body as text, decoded as :func:`parse_html` decodes it (to show a page)."""
    return _utf8(body, content_type).decode("utf-8", "replace")


def _utf8(body: bytes, content_type: str | None) -> bytes:
    """The body as UTF-8 without NUL bytes: header charset, then BOM/meta, then UTF-8, then a guess."""
    encoding, bom = read_bom(body)
    if encoding is not None and bom is not None:  # (both or neither)
        return _recode(body[len(bom) :], [encoding])
    header = http_content_type_encoding(content_type) if content_type else None
    meta = None if header else html_body_declared_encoding(body)
    if (header or meta or "utf-8") == "utf-8" or body.isascii():
        if _is_utf8(body):  # ASCII reads the same in every charset a page can declare
            return body.replace(b"\x00", b"") if b"\x00" in body else body
    if header:
        meta = html_body_declared_encoding(body)
    return _recode(body, [e for e in dict.fromkeys((header, meta)) if e])


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _recode(body: bytes, candidates: list[str]) -> bytes:
    """Decode with the first candidate that fits strictly, else the best lenient guess; encode UTF-8."""
    for encoding in [*candidates, "utf-8"]:
        try:
            text = body.decode(encoding)
            break
        except (UnicodeDecodeError, LookupError):
            continue
    else:
        text = _lenient(body, candidates)
    if "\x00" in text:
        text = text.replace("\x00", "")
    return text.encode("utf-8", "replace")


def _lenient(body: bytes, candidates: list[str]) -> str:
    """A declared non-UTF-8 charset with replacements, else UTF-8 if mostly valid, else cp1252."""
    for encoding in candidates:
        if encoding != "utf-8":
            try:
                return body.decode(encoding, "replace")
            except LookupError:
                continue
    text = body.decode("utf-8", "replace")
    bad = text.count("\ufffd")
    non_ascii = len(text) - len(text.encode("ascii", "ignore"))
    return text if non_ascii - bad >= bad else body.decode("cp1252", "replace")


_PARSERS: dict[str, etree.HTMLParser] = {}


def _parser() -> etree.HTMLParser:
    """One UTF-8 HTML parser, made on first use (parsers are cheap to reuse, costly to build)."""
    parser = _PARSERS.get("utf-8")
    if parser is None:
        parser = etree.HTMLParser(encoding="utf-8", no_network=True, collect_ids=False, default_doctype=False)
        _PARSERS["utf-8"] = parser
    return parser

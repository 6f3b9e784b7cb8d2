"""Are the documentation site's internal links whole? (CI, after sphinx-build.)

Every relative ``href`` and ``src`` of every built HTML page must name a file of the site, and its ``#fragment``
an ``id`` in that file.  External links (``http:``, ``https:``, ``mailto:``) are not fetched.  Exit 1 naming each
broken link.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class Page(HTMLParser):
    """The ids of one HTML page and the links it makes."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            elif name in ("href", "src") and value and not (tag == "link" and name == "href" and "_static" in value):
                self.links.append(value)


def read(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken(site: Path) -> list[str]:
    """Each broken internal link, as ``page: link (why)``."""
    pages = {path.resolve(): read(path) for path in site.rglob("*.html")}
    found = []
    for path, page in sorted(pages.items()):
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                found.append(f"{path.relative_to(site.resolve())}: {link} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else read(target).ids
                if unquote(parts.fragment) not in ids:
                    found.append(f"{path.relative_to(site.resolve())}: {link} (no such anchor)")
    return found


def main() -> int:
    site = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/_build/html")
    if not (site / "index.html").exists():
        print(f"ci: no site at {site} (build it first)", file=sys.stderr)
        return 2
    found = broken(site)
    for line in found:
        print(f"ci: broken link: {line}", file=sys.stderr)
    print(f"ci: docs: {sum(1 for _ in site.rglob('*.html'))} pages, {len(found)} broken internal links")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A proxy URL (``[[sites]] proxy``) checked and split: its address and its ``Proxy-Authorization`` value.

The configuration checks it at load, the fetcher (:mod:`spiderd.fetch.proxy`) connects with it; both show it only
through :func:`spiderd.core.secrets.redact`, so its password is never in an error or a log.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from spiderd.core.secrets import redact


@dataclass(frozen=True)
class ProxyURL:
    """A proxy's address and its ``Proxy-Authorization`` value (None without credentials)."""

    host: str
    port: int
    authorization: bytes | None = field(repr=False)

    @classmethod
    def parse(cls, url: str) -> ProxyURL:
        """``http://[user[:pass]@]host:port``; ValueError (the URL redacted) otherwise."""
        shown = redact(url)
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise ValueError(f"expected http://[USER:PASS@]HOST:PORT, got {shown!r}") from None
        if parts.scheme != "http" or not parts.hostname or port is None or port == 0:
            raise ValueError(f"expected http://[USER:PASS@]HOST:PORT (a port is needed), got {shown!r}")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"expected no path, query or fragment, got {shown!r}")
        authorization = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            authorization = b"Basic " + base64.b64encode(pair.encode("utf-8"))
        return cls(parts.hostname, port, authorization)

"""The demo site's static copy on disk, and an nginx.conf to serve it (the benchmark's fast peer), its faults
included if asked (``nginx_conf(faults=spec)``: the benchmark's site with errors)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from twisted.logger import Logger

from spiderd.demo.pages import PRIVATE, SiteSpec, item_path, render

log = Logger()


def static_paths(spec: SiteSpec) -> Iterator[str]:
    """The site paths a static copy holds, one file each (``/`` is ``/index.html``)."""
    yield from ("/index.html", "/robots.txt", PRIVATE)
    expected = spec.expected(static=True)
    yield from (f"/list/{n}.html" for n in range(1, spec.lists + 1))
    yield from (item_path(i) for i in range(1, spec.details + 1) if item_path(i) in expected.details_ok)


def write_static(spec: SiteSpec, directory: str | Path) -> list[str]:
    """Write the static copy of the site under ``directory``; return the site paths written.

    500s, slow pages and redirects need a dynamic server (or ``nginx_conf``'s
    ``faults``), so here they become ordinary detail pages; 404s are files that
    are not written.
    """
    root = Path(directory)
    written = []
    for part in ("list", "item", "private"):
        (root / part).mkdir(parents=True, exist_ok=True)
    for path in static_paths(spec):
        (root / path.lstrip("/")).write_bytes(render(spec, path, static=True)[2])
        written.append(path)
    log.info("wrote {count} files of the demo site to {root}", count=len(written), root=str(root))
    return written


_NGINX_TEMPS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
_NGINX = """\
worker_processes {workers};
pid "{run}/nginx.pid";
error_log "{run}/error.log" warn;
events {{
    worker_connections 1024;
}}
http {{
    access_log off;
    log_not_found off;
    server_tokens off;
    sendfile on;
    keepalive_requests 100000;
    types {{
        text/html html;
        text/plain txt;
    }}
    default_type application/octet-stream;
    charset utf-8;
    gzip {gzip};
    gzip_types text/plain;
{temps}    server {{
        listen 127.0.0.1:{port};
        root "{root}";
        index index.html;
{locations}    }}
}}
"""


def nginx_conf(directory: str | Path, port: int, run_dir: str | Path | None = None, workers: int = 2,
               user: str | None = None, gzip: bool = True, faults: SiteSpec | None = None) -> str:
    """An nginx.conf serving a ``write_static`` copy on 127.0.0.1:``port``.

    Pid file, error log and temp directories go under ``run_dir`` (default: a
    sibling ``<directory>.nginx``, which must exist).  As root, workers run as
    ``user`` (default root, so they can read a private temp dir).  ``gzip``
    compresses HTML for clients that accept it.  ``faults``: the spec the copy
    was written from; its 500s and redirects answer as ``render`` answers them,
    and its slow pages trickle out at a rate that takes ``slow_delay`` seconds
    (so the copy answers as ``faults.expected()`` says, not ``expected(static=True)``).
    Start with ``nginx -c CONF -g 'daemon off;'``.
    """
    root = Path(directory).resolve()
    run = Path(run_dir).resolve() if run_dir is not None else root.with_name(root.name + ".nginx")
    if user is None and _is_root():
        user = "root"
    temps = "".join(f'    {kind}_temp_path "{run}/{kind}";\n' for kind in _NGINX_TEMPS)
    lines = f"user {user};\n" if user else ""
    locations = fault_locations(faults) if faults is not None else ""
    return lines + _NGINX.format(workers=workers, run=run, temps=temps, port=port, root=root,
                                 gzip="on" if gzip else "off", locations=locations)


def fault_locations(spec: SiteSpec) -> str:
    """nginx ``location`` blocks for ``spec``'s 500s, redirects (a relative ``Location``, as the demo site's)
    and slow pages (``limit_rate``: the page's bytes over ``slow_delay`` seconds)."""
    expected = spec.expected()
    lines = ["        absolute_redirect off;\n"] if expected.redirects else []
    for path in sorted(expected.server_error | frozenset(expected.redirects)):
        status, headers, _ = render(spec, path)
        target = headers.get(b"location", b"").decode("ascii")
        lines.append(f"        location = {path} {{ return {status}{' ' + target if target else ''}; }}\n")
    for path in sorted(expected.slow):
        rate = max(1, int(len(render(spec, path)[2]) / spec.slow_delay))
        lines.append(f"        location = {path} {{ limit_rate {rate}; }}\n")
    return "".join(lines)


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0

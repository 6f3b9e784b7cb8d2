"""The offline demo: spiderd's settings for the bundled site, and a service that serves it on loopback."""

from __future__ import annotations

import os
import shutil
from typing import Any, Mapping

from twisted.application.service import Service
from twisted.internet.interfaces import IListeningPort
from twisted.logger import Logger

from spiderd.config import settings as cfg
from spiderd.contracts.pool import IURLQueue
from spiderd.core.reactors import ITCPClock

log = Logger()

DEMO_DATA_DIR = "./spiderd-demo"

DEMO: dict[str, Any] = {
    "spiderd": {"data_dir": DEMO_DATA_DIR, "log_interval": 5, "exit_when_done": True},
    "pool": {"failure_threshold": 2, "pending_threshold": 60},
    "fetch": {"concurrency": 16, "per_host_concurrency": 16, "timeout": 10, "connect_timeout": 5},
    "parse": {"workers": 1},
    "store": {"url": "sqlite:///pages.sqlite3", "compression_preset": "fast"},
    "items": {"rotate_count": 500},
    "api": {"port": 0},  # any free port (logged): a demo must not collide with a running spiderd
    "sites": [
        {
            "name": "demo-shop",
            "allowed_hosts": ["127.0.0.1"],
            "list_urls": [r"/$", r"/list/\d+\.html$"],
            "detail_urls": [r"/item/\d+\.html$"],
            "fields": {
                "title": "css:h1.title::text",
                "price": "css:span.price::text",
                "tags": {"css": "a[rel=tag]::text", "all": True},
            },
        }
    ],
}


def settings(overrides: Mapping[str, Any]) -> cfg.Settings:
    """The demo's settings (command-line overrides applied)."""
    return cfg.from_dict(DEMO, "<demo>", overrides)


def fresh(overrides: Mapping[str, Any]) -> cfg.Settings:
    """The demo's settings, its data directory emptied (``twistd spiderd --demo``)."""
    demo = settings(overrides)
    clean(demo.spiderd.data_dir)
    return demo


class DemoSiteService(Service):
    """Serves the demo site on 127.0.0.1 (a free port) and seeds the pool with its front page.

    The demo starts from an empty data directory every time, so each run crawls the whole site.
    """

    def __init__(self, reactor: ITCPClock, pool: IURLQueue, data_dir: str, items_dir: str) -> None:
        """``items_dir``: where the items end up (the feeds of batches, or ``[items] dir``), under ``data_dir``."""
        self._reactor = reactor
        self._pool = pool
        self._data_dir = data_dir
        self._items_dir = items_dir
        self._port: IListeningPort | None = None

    def startService(self) -> None:
        super().startService()
        from spiderd.demo.pages import SiteSpec

        from spiderd.demo.site import listen, port_of
        self._port = listen(SiteSpec(slow_delay=1.0), self._reactor)
        root = f"http://127.0.0.1:{port_of(self._port)}/"
        self._pool.add(root)
        log.info("Demo: crawling {root} into {data_dir}", root=root, data_dir=os.path.abspath(self._data_dir))

    def stopService(self) -> Any:
        super().stopService()
        data = os.path.abspath(self._data_dir)
        items = os.path.join(data, self._items_dir)
        log.info("Demo finished. Items: {items}/*.jl  Pages: {pages} (table crawler_html, html lzma-compressed)",
                 items=items, pages=os.path.join(data, "pages.sqlite3"))
        return self._port.stopListening() if self._port is not None else None


MARKER = ".spiderd-demo"


def clean(data_dir: str) -> None:
    """Empty the demo's data directory, which must be one the demo made (it holds a marker file)."""
    if os.path.exists(data_dir):
        if not os.path.exists(os.path.join(data_dir, MARKER)):
            raise cfg.ConfigError(f"<demo>: spiderd.data_dir: {data_dir!r} exists and is not a demo directory; "
                                  "choose another --data-dir")
        shutil.rmtree(data_dir)
    os.makedirs(data_dir)
    with open(os.path.join(data_dir, MARKER), "w") as f:
        f.write("made by twistd spiderd --demo; emptied at every demo run\n")

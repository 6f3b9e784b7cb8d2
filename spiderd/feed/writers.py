"""The in-process item writers of ``[items]``: JSON-lines items, WARC files of the answers, or both."""

from __future__ import annotations

from spiderd.config.sections import ItemsSection
from spiderd.contracts.pool import ICheckpoints
from spiderd.core.blocking import Blocking
from spiderd.core.reactors import IThreadedClock
from spiderd.feed.items import ItemWriter
from spiderd.feed.warcfiles import WarcWriter


def item_writers(config: ItemsSection, directory: str, reactor: IThreadedClock, pool: ICheckpoints,
                 blocking: Blocking) -> tuple[ItemWriter | None, WarcWriter | None]:
    """The items writer (unless ``format = "warc"``) and the WARC writer (``"warc"`` or ``"both"``), into
    ``directory``, each on its lane of ``blocking`` (``items``, ``warc``); their files complete by count and by
    time (``rotate_seconds``, ``rotate_idle``)."""
    age, idle = config.rotate_seconds, config.rotate_idle
    items = ItemWriter(reactor, directory, config.rotate_count, pool=pool, lane=blocking.lane("items"),
                       rotate_seconds=age, rotate_idle=idle) if config.format != "warc" else None
    archive = WarcWriter(reactor, directory, blocking.lane("warc"), rotate_count=config.rotate_count,
                         rotate_bytes=config.warc_rotate_mb * 2**20, rotate_seconds=age,
                         rotate_idle=idle) if config.format in ("warc", "both") else None
    return items, archive

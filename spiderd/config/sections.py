"""One frozen dataclass per section of the configuration, its fields named as the TOML keys.

Each component receives the section (or the few sections) it reads, not the whole
:class:`~spiderd.config.settings.Settings`.  The kind of each key (its converter) is in
:mod:`spiderd.config.schema`; a test checks that the two name the same keys.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from spiderd.core.compression import FAST
from spiderd.core.net.serving import BACKLOG, HEADER_TIMEOUT, IDLE_TIMEOUT
from spiderd.core.rules import SITEMAP_MAX_SIZE, SITEMAP_MAX_URLS, AdaptiveDelay, HostRule, PoliteRules, host_adaptive

__all__ = [
    "ApiSection", "BatchSection", "FeedSection", "FetchSection", "ItemsSection", "ParseSection", "PoolSection",
    "RenderSection", "SitemapsSection", "SpiderdSection", "StoreSection", "WorkerSection",
]


@dataclass(frozen=True)
class SpiderdSection:
    """``[spiderd]``: the node's role and data directory."""

    role: str = "all"
    data_dir: str = "./spiderd-data"
    log_interval: float = 60.0
    exit_when_done: bool = False

    def path(self, relative: str) -> str:
        """A path under the data directory (absolute paths are kept)."""
        return os.path.join(self.data_dir, relative)


@dataclass(frozen=True)
class PoolSection:
    """``[pool]``: the URL pool (frontier), its backend, seeds, limits and recrawls."""

    backend: str = "leveldb"
    seeds: Sequence[str] = ()  # from a file: a URLList (spiderd.core.urllist), compact
    hubs: Sequence[str] = ()
    hub_refresh_span: float = 600.0
    hub_percent: int = 50  # seed 000's pop(count, hub_percent): the share of a pop that may go to due hubs
    failure_threshold: int = 3
    pending_threshold: float = 300.0
    max_url_length: int = 2083
    max_path_depth: int = 32
    max_urls_per_host: int = 0
    max_active_hosts: int = 10000  # hosts (Redis: domains) with waiting URLs taking turns at once; 0 = no limit
    max_hops: int = 0  # links from a seed a URL may be (seeds, hubs, API adds: 0); 0 = no limit
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "spiderd:"
    redis_namespace: str = ""
    redis_seen_bucket_bits: int = 16
    redis_partitions: int = 12  # redis+cluster:// only: the pool's partitions (12: even on 1, 2, 3, 4, 6, 12 masters)
    redis_status_wait: float = 0.05  # seconds a status waits to go out with others (with the next pop, or alone)
    redis_pop_batch: int = 8  # with redis_pop_ahead 0: the crawler pops when this many fetch slots are free
    redis_pop_ahead: int = 32  # leased URLs the crawler pops ahead of its free slots (at most [fetch] concurrency)
    redis_known_urls: int = 100000  # URLs a node remembers the pool knows, so adding them again costs Redis nothing
    redis_durability: str = "none"  # a write is answered once its master has it ("none"), a replica ("replica": WAIT)
    # or the master's and a replica's AOF ("aof": WAITAOF, Redis 7.2 on)
    seed_cron: str = ""
    recrawl_every: float = 60.0
    recrawl_batch: int = 1000
    recrawl_list_ratio: float = 0.2
    recrawl_detail_ratio: float = 0.1
    list_ratio: float = 0.0  # seed 004's get_list: the share of a pop's waiting URLs reserved for list URLs
    detail_ratio: float = 0.0  # seed 004's get_detail: the same for detail URLs
    linkbase: bool = False
    linkbase_max: int = 0


@dataclass(frozen=True)
class FetchSection:
    """``[fetch]`` and its ``[fetch.hosts."name"]`` tables: how pages are fetched, and how politely."""

    concurrency: int = 64
    per_host_concurrency: int = 8
    per_host_delay: float = 0.0
    politeness: str = "host"  # "ip": the hosts on one address share one politeness slot (delay, concurrency)
    delay_factor: float = 0.0  # adaptive politeness: a host's next request waits this many times the last fetch's duration; 0: off
    min_delay: float = 0.0  # ... at least this long (seconds, from the fetch's end), when delay_factor > 0
    max_delay: float = 30.0  # ... at most this long
    hosts: Mapping[str, HostRule] = field(default_factory=dict)  # [fetch.hosts."name"], by lowercased host
    connect_timeout: float = 10.0
    timeout: float = 30.0
    max_body_size: int = 10 * 1024 * 1024
    max_redirects: int = 5
    keepalive_timeout: float = 10.0
    max_idle_connections: int = 1000  # idle keep-alive connections of all hosts together (0: no cap)
    dns_cache_ttl: float = 300.0  # seconds a host name's addresses are reused; 0: look up at every connection
    user_agent: str = "spiderd/0.1 (+https://github.com/spiderd/spiderd)"
    robots: bool = True
    obey_nofollow: bool = True  # rel="nofollow" links are not followed
    obey_meta_robots: bool = True  # <meta name="robots"> and X-Robots-Tag: noindex, nofollow, none
    canonical: bool = True  # a detail page's <link rel="canonical">: the item's url, and that URL done
    source_addresses: tuple[str, ...] = ()
    max_retry_after: float = 3600.0  # a 429/503's Retry-After (or back-off) blocks its host this long at most
    max_throttles: int = 10  # a URL's throttled fetches before the next one counts as its failure
    conditional_get: bool = True  # hubs and recrawled pages are fetched with If-None-Match / If-Modified-Since
    processes: int = 0  # child processes that fetch, parse and compress pages (-1: one per CPU; 0: the main process)

    @property
    def adaptive(self) -> AdaptiveDelay:
        """The adaptive politeness rule (off with ``delay_factor = 0``)."""
        return AdaptiveDelay(self.delay_factor, self.min_delay, self.max_delay)

    @property
    def host_overrides(self) -> dict[str, tuple[float, int]]:
        """Each ``[fetch.hosts."name"]`` table's (delay, concurrency)."""
        return {host: (rule.delay, rule.concurrency) for host, rule in self.hosts.items()}

    @property
    def host_adaptive(self) -> dict[str, AdaptiveDelay]:
        """The adaptive rule of each host whose table sets one of its keys (the others take ``adaptive``)."""
        return host_adaptive(self.hosts, self.adaptive)

    @property
    def polite(self) -> PoliteRules:
        """The politeness keys' values, as the pools, the worker and the sub-requests pace hosts by them."""
        return PoliteRules(self.per_host_delay, self.per_host_concurrency, self.host_overrides, self.adaptive,
                           self.host_adaptive)


@dataclass(frozen=True)
class SitemapsSection:
    """``[sitemaps]``: which sitemaps are read, how much of them, and how often."""

    from_robots: bool = True  # the Sitemap: lines of robots.txt (read when robots.txt is: fetch.robots)
    paths: tuple[str, ...] = ()  # paths tried on every site host besides, such as "/sitemap.xml"
    max_urls: int = SITEMAP_MAX_URLS  # entries read per sitemap file (the protocol's 50,000 at most)
    max_size: int = SITEMAP_MAX_SIZE  # uncompressed bytes read per file (the protocol's 50 MB at most)
    max_files: int = 100  # sitemap files (indexes included) read per host each time its sitemaps are read
    refresh: float = 86400.0  # seconds between two reads of one host's sitemaps; 0: once per run
    lastmod: bool = True  # on a later read, a URL whose lastmod is after the previous read is queued again


@dataclass(frozen=True)
class ParseSection:
    """``[parse]``: the parse children."""

    workers: int = -1  # -1: one per CPU of this process's affinity (spiderd.core.cpus); 0: in the main process
    max_rss_mb: int = 512  # a parser process holding more is replaced (it answers what it holds first)


@dataclass(frozen=True)
class RenderSection:
    """``[render]``: the headless browsers that render the pages of ``[[sites]] render = "always"`` or "auto"."""

    browser: str = "/usr/bin/chromium"  # the distribution's Chromium (nothing is ever downloaded)
    browsers: int = 1  # browser processes at once
    pages_per_browser: int = 4  # pages each renders at once (browsers x pages_per_browser: the render slots)
    max_pages: int = 500  # pages a browser renders before it is replaced (the first ones staggered: see RenderPool)
    pages_per_context: int = 100  # pages a browser context serves before a new one takes its place (+-20%)
    max_rss_mb: int = 1024  # a browser whose processes hold more (private resident memory, summed) is replaced
    navigation_timeout: float = 15.0  # seconds for the page's load event
    settle_timeout: float = 10.0  # seconds after it for the page to settle (network idle, or render_wait)
    idle_time: float = 0.5  # no sub-request in flight this long: the page has settled
    max_subrequests: int = 200  # sub-requests a page may make; past them they are refused (the page is cut)
    max_subrequest_bytes: int = 20 * 1024 * 1024  # bytes of sub-request bodies a page may take
    load_media: bool = False  # images, media and fonts are loaded (off: refused)
    auto_probe: int = 3  # "auto": pages of a host whose raw HTML gives what the render gives, then it is not rendered
    auto_recheck: int = 50  # "auto": then one page in this many is rendered again to check
    auto_hosts: int = 10000  # "auto": hosts (and path sections) whose choice is remembered


@dataclass(frozen=True)
class StoreSection:
    """``[store]``: the page store."""

    url: str | tuple[str, ...] = "sqlite:///pages.sqlite3"  # a tuple: MySQL shards; "none": no store
    compression_preset: int = FAST  # "fast" (XZ preset 0, short match search), or an XZ preset 0..9
    batch_size: int = 100
    item_table: bool = False  # each page's item in crawler_item too, in the page's transaction (seed 004's pagebase)


@dataclass(frozen=True)
class ItemsSection:
    """``[items]``: the items written by this node (and the format of its worker's feeds)."""

    dir: str = "items"
    rotate_count: int = 10000
    rotate_seconds: float = 300.0  # a file is complete this long after its first line
    rotate_idle: float = 60.0  # or once no line came for this long (the crawl is idle)
    format: str = "jsonl"  # "warc" or "both": the fetched answers as WARC files too (needs warcio); "parquet": the
    # worker's feeds as Parquet (needs pyarrow)
    warc_rotate_mb: int = 1000  # a WARC file is complete at this size (or at rotate_count answers)
    skip_duplicate_content: bool = False  # a detail page whose content digest another URL gave first: no item


@dataclass(frozen=True)
class BatchSection:
    """``[batch]``: detail URLs sent in batches to Scrapyd-compatible workers."""

    targets: tuple[str, ...] = ("local",)
    project: str = "spiderd"
    spider: str = ""  # "": each batch names the site of its URLs
    feed_uri: str = ""
    size: int = 1000
    flush_interval: float = 30.0
    timeout: float = 10.0
    max_setting_bytes: int = 100_000


@dataclass(frozen=True)
class WorkerSection:
    """``[worker]``: the Scrapyd-compatible worker (the worker role, or the all role's own)."""

    bind: str = "127.0.0.1"
    port: int = -1  # -1: 6800 in the worker role, a free port for the all role's own worker
    listen: str = ""  # a server endpoint string (tcp:..., unix:PATH, systemd:...); "": bind and port
    backlog: int = BACKLOG  # the listen queue of a tcp or unix endpoint
    header_timeout: float = HEADER_TIMEOUT  # seconds a connection may take over a request's headers
    idle_timeout: float = IDLE_TIMEOUT  # seconds a connection may stay idle
    username: str = ""
    password: str = field(default="", repr=False)
    project: str = "spiderd"
    node_name: str = ""
    max_jobs: int = 4
    concurrency: int = 0  # 0: fetch.concurrency
    job_concurrency: int = 0
    redirect_window: float = 86400.0
    max_job_urls: int = 50_000
    feed_template: str = ""
    feed_dirs: tuple[str, ...] = ()
    stop_timeout: float = 30.0
    finished_to_keep: int = 100


@dataclass(frozen=True)
class FeedSection:
    """``[feed]``: shipping the feed files."""

    retry_max: float = 300.0
    stop_timeout: float = 30.0
    timeout: float = 60.0  # seconds an FTP, FTPS or SFTP step may take
    ca_file: str = ""  # PEM CAs for FTPS ("": the system's)
    insecure: bool = False  # FTPS certificates not checked
    known_hosts: str = ""  # SFTP host keys (OpenSSH's format)
    ssh_key: str = ""  # an SFTP private key
    partition_grace: float = 300.0  # seconds after a partition's hour (or day) before it may close


@dataclass(frozen=True)
class ApiSection:
    """``[api]``: the status and admin HTTP API."""

    bind: str = "127.0.0.1"
    port: int = 6810
    listen: str = ""  # a server endpoint string (tcp:..., unix:PATH, systemd:...); "": bind and port
    backlog: int = BACKLOG  # the listen queue of a tcp or unix endpoint
    header_timeout: float = HEADER_TIMEOUT  # seconds a connection may take over a request's headers
    idle_timeout: float = IDLE_TIMEOUT  # seconds a connection may stay idle
    token: str = field(default="", repr=False)
    username: str = ""
    password: str = field(default="", repr=False)

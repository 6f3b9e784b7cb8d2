"""The key schema of the configuration: which sections and keys exist, and the kind of value each key takes (a
converter of :mod:`spiderd.config.convert`).  Each key sets the field of the same name of its section's dataclass
(:mod:`spiderd.config.sections`).  Unknown keys are errors.
"""

from __future__ import annotations

# section -> key -> kind; the kinds are the converters of spiderd.config.convert, the keys the fields of the
# section's dataclass (spiderd.config.sections).
SCHEMA: dict[str, dict[str, str]] = {
    "spiderd": {
        "role": "role",
        "data_dir": "str",
        "log_interval": "positive",
        "exit_when_done": "bool",
    },
    "pool": {
        "backend": "backend",
        "seeds": "urls",
        "hubs": "urls",
        "hub_refresh_span": "positive",
        "hub_percent": "percent",
        "failure_threshold": "count",
        "pending_threshold": "positive",
        "max_url_length": "positive_int",
        "max_path_depth": "positive_int",
        "max_urls_per_host": "count",
        "max_active_hosts": "count",  # 0: every host with waiting URLs takes turns
        "max_hops": "max_hops",  # link hops from a seed (0: no limit)
        "redis_url": "redis_url",
        "redis_prefix": "str",
        "redis_namespace": "str",
        "redis_seen_bucket_bits": "bucket_bits",
        "redis_partitions": "partitions",  # redis+cluster:// only
        "redis_status_wait": "non_negative",  # 0: each status at once
        "redis_pop_batch": "positive_int",
        "redis_pop_ahead": "count",  # 0: pop for free slots only (redis_pop_batch)
        "redis_known_urls": "count",  # 0: none remembered
        "redis_durability": "durability",  # "none", "replica" (WAIT) or "aof" (WAITAOF)
        "seed_cron": "cron",
        "recrawl_every": "positive",
        "recrawl_batch": "positive_int",
        "recrawl_list_ratio": "ratio",
        "recrawl_detail_ratio": "ratio",
        "list_ratio": "ratio",
        "detail_ratio": "ratio",
        "linkbase": "bool",
        "linkbase_max": "count",
    },
    "fetch": {
        "concurrency": "positive_int",
        "per_host_concurrency": "positive_int",
        "per_host_delay": "non_negative",
        "politeness": "politeness",  # "host", or "ip": the hosts on one address share one slot
        "delay_factor": "delay_factor",
        "min_delay": "non_negative",
        "max_delay": "non_negative",
        "hosts": "hosts",
        "connect_timeout": "positive",
        "timeout": "positive",
        "max_body_size": "positive_int",
        "max_redirects": "count",
        "keepalive_timeout": "positive",
        "max_idle_connections": "count",  # 0: no cap
        "dns_cache_ttl": "non_negative",
        "user_agent": "header",
        "robots": "bool",
        "obey_nofollow": "bool",
        "obey_meta_robots": "bool",
        "canonical": "bool",
        "source_addresses": "addresses",
        "max_retry_after": "positive",  # throttling answers (429, 503): the longest host block
        "max_throttles": "count",  # throttles of one URL that do not count as its failures
        "conditional_get": "bool",  # a recrawl sends the page's ETag / Last-Modified back
        "processes": "workers",  # fetch children (spiderd.fetch.fetchpool): -1 one per CPU, 0 none
    },
    "sitemaps": {
        "from_robots": "bool",  # read the Sitemap: lines of each site host's robots.txt
        "paths": "url_paths",  # and these paths of every site host (["/sitemap.xml"])
        "max_urls": "sitemap_urls",
        "max_size": "sitemap_size",
        "max_files": "positive_int",  # sitemap files read per host each time
        "refresh": "non_negative",  # seconds between two reads of a host's sitemaps; 0: once
        "lastmod": "bool",  # a URL whose lastmod is after the last read is queued again
    },
    "parse": {"workers": "workers", "max_rss_mb": "positive_int"},
    "render": {  # headless browsers for [[sites]] render = "always" / "auto"
        "browser": "str",
        "browsers": "positive_int",
        "pages_per_browser": "positive_int",
        "max_pages": "positive_int",
        "pages_per_context": "positive_int",
        "max_rss_mb": "positive_int",
        "navigation_timeout": "positive",
        "settle_timeout": "positive",
        "idle_time": "positive",
        "max_subrequests": "count",
        "max_subrequest_bytes": "positive_int",
        "load_media": "bool",
        "auto_probe": "positive_int",
        "auto_recheck": "positive_int",
        "auto_hosts": "positive_int",
    },
    "batch": {
        "targets": "targets",
        "project": "name",
        "spider": "str",
        "feed_uri": "feed_template",
        "size": "positive_int",
        "flush_interval": "positive",
        "timeout": "positive",
        "max_setting_bytes": "setting_bytes",
    },
    "worker": {
        "bind": "str",
        "port": "port",
        "listen": "listen",  # a server endpoint string, instead of bind and port
        "backlog": "backlog",
        "header_timeout": "positive",
        "idle_timeout": "positive",
        "username": "str",
        "password": "str",
        "project": "name",
        "node_name": "str",
        "max_jobs": "positive_int",
        "concurrency": "count",
        "job_concurrency": "count",
        "redirect_window": "non_negative",
        "max_job_urls": "positive_int",
        "feed_template": "feed_template",
        "feed_dirs": "abs_dirs",
        "stop_timeout": "non_negative",
        "finished_to_keep": "count",
    },
    "feed": {
        "retry_max": "positive",
        "stop_timeout": "non_negative",
        "timeout": "positive",  # seconds an FTP, FTPS or SFTP step may take
        "ca_file": "ca_file",  # PEM CAs that FTPS certificates are checked against ("": the system's)
        "insecure": "bool",  # FTPS certificates not checked (an explicit choice)
        "known_hosts": "readable_file",  # SFTP host keys, OpenSSH's format
        "ssh_key": "readable_file",  # an SFTP private key (besides the URI's password)
        "partition_grace": "non_negative",  # seconds after a partition's hour or day before its marker
    },
    "api": {
        "bind": "str",
        "port": "api_port",
        "listen": "listen",  # a server endpoint string, instead of bind and port
        "backlog": "backlog",
        "header_timeout": "positive",
        "idle_timeout": "positive",
        "token": "token",
        "username": "str",
        "password": "str",
    },
    "store": {
        "url": "store_url",
        "compression_preset": "preset",
        "batch_size": "positive_int",
        "item_table": "bool",  # each page's item in crawler_item too
    },
    "items": {
        "dir": "str",
        "rotate_count": "positive_int",
        "rotate_seconds": "positive",  # a file is complete this long after its first line
        "rotate_idle": "positive",  # or once no line came for this long
        "format": "feed_format",  # "jsonl", "warc" (the fetched answers, warcio), "both", or "parquet" (pyarrow)
        "warc_rotate_mb": "positive_int",
        "skip_duplicate_content": "bool",  # mirror pages: one item per content digest
    },
}
SITE_KEYS = {  # the keys of one [[sites]] table (spiderd.config.sites)
    "name",
    "allowed_hosts",
    "list_urls",
    "detail_urls",
    "fields",
    "follow_detail_links",
    "recrawl_list",
    "recrawl_detail",
    "headers",
    "proxy",
    "cookies",
    "max_hops",
    "render",  # "never" (default), "always" or "auto": pages rendered in a headless browser ([render])
    "render_wait",  # a CSS selector: the rendered page has settled once it is there (default: network idle)
    "render_hosts",  # hosts besides allowed_hosts a rendered page's sub-requests may go to
    "start_urls",
}


def describe() -> dict[str, list[str]]:
    """The known keys per section (for error messages and docs)."""
    known = {section: list(keys) for section, keys in SCHEMA.items()}
    known["sites"] = sorted(SITE_KEYS)
    return known

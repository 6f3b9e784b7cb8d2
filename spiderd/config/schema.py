"""The key schema of the configuration: which sections and keys exist, the Settings attribute each key sets, and
the kind of value it takes (a converter of :mod:`spiderd.config.convert`).  Unknown keys are errors.
"""

from __future__ import annotations

# section -> key -> (attribute, kind); the kinds are the converters of spiderd.config.convert.
SCHEMA: dict[str, dict[str, tuple[str, str]]] = {
    "spiderd": {
        "role": ("role", "role"),
        "data_dir": ("data_dir", "str"),
        "log_interval": ("log_interval", "positive"),
        "exit_when_done": ("exit_when_done", "bool"),
    },
    "pool": {
        "backend": ("pool_backend", "backend"),
        "seeds": ("seeds", "urls"),
        "hubs": ("hubs", "urls"),
        "hub_refresh_span": ("hub_refresh_span", "positive"),
        "hub_percent": ("hub_percent", "percent"),
        "failure_threshold": ("failure_threshold", "count"),
        "pending_threshold": ("pending_threshold", "positive"),
        "max_url_length": ("max_url_length", "positive_int"),
        "max_path_depth": ("max_path_depth", "positive_int"),
        "max_urls_per_host": ("max_urls_per_host", "count"),
        "max_hops": ("max_hops", "max_hops"),  # link hops from a seed (0: no limit)
        "redis_url": ("redis_url", "redis_url"),
        "redis_prefix": ("redis_prefix", "str"),
        "redis_namespace": ("redis_namespace", "str"),
        "redis_seen_bucket_bits": ("redis_seen_bucket_bits", "bucket_bits"),
        "redis_partitions": ("redis_partitions", "partitions"),
        "seed_cron": ("seed_cron", "cron"),
        "recrawl_every": ("recrawl_every", "positive"),
        "recrawl_batch": ("recrawl_batch", "positive_int"),
        "recrawl_list_ratio": ("recrawl_list_ratio", "ratio"),
        "recrawl_detail_ratio": ("recrawl_detail_ratio", "ratio"),
        "list_ratio": ("list_ratio", "ratio"),
        "detail_ratio": ("detail_ratio", "ratio"),
        "linkbase": ("linkbase", "bool"),
        "linkbase_max": ("linkbase_max", "count"),
    },
    "fetch": {
        "concurrency": ("concurrency", "positive_int"),
        "per_host_concurrency": ("per_host_concurrency", "positive_int"),
        "per_host_delay": ("per_host_delay", "non_negative"),
        "delay_factor": ("delay_factor", "delay_factor"),
        "min_delay": ("min_delay", "non_negative"),
        "max_delay": ("max_delay", "non_negative"),
        "hosts": ("host_rules", "hosts"),
        "connect_timeout": ("connect_timeout", "positive"),
        "timeout": ("timeout", "positive"),
        "max_body_size": ("max_body_size", "positive_int"),
        "max_redirects": ("max_redirects", "count"),
        "keepalive_timeout": ("keepalive_timeout", "positive"),
        "dns_cache_ttl": ("dns_cache_ttl", "non_negative"),
        "user_agent": ("user_agent", "header"),
        "robots": ("robots", "bool"),
        "obey_nofollow": ("obey_nofollow", "bool"),
        "obey_meta_robots": ("obey_meta_robots", "bool"),
        "canonical": ("canonical", "bool"),
        "source_addresses": ("source_addresses", "addresses"),
        "max_retry_after": ("max_retry_after", "positive"),  # throttling answers (429, 503): the longest host block
        "max_throttles": ("max_throttles", "count"),  # throttles of one URL that do not count as its failures
        "conditional_get": ("conditional_get", "bool"),  # a recrawl sends the page's ETag / Last-Modified back
    },
    "sitemaps": {
        "from_robots": ("sitemap_from_robots", "bool"),  # read the Sitemap: lines of each site host's robots.txt
        "paths": ("sitemap_paths", "url_paths"),  # and these paths of every site host (["/sitemap.xml"])
        "max_urls": ("sitemap_max_urls", "sitemap_urls"),
        "max_size": ("sitemap_max_size", "sitemap_size"),
        "max_files": ("sitemap_max_files", "positive_int"),  # sitemap files read per host each time
        "refresh": ("sitemap_refresh", "non_negative"),  # seconds between two reads of a host's sitemaps; 0: once
        "lastmod": ("sitemap_lastmod", "bool"),  # a URL whose lastmod is after the last read is queued again
    },
    "parse": {"workers": ("parse_workers", "workers"), "max_rss_mb": ("parse_max_rss_mb", "positive_int")},
    "batch": {
        "targets": ("batch_targets", "targets"),
        "project": ("batch_project", "name"),
        "spider": ("batch_spider", "str"),
        "feed_uri": ("batch_feed_uri", "feed_template"),
        "size": ("batch_size", "positive_int"),
        "flush_interval": ("batch_flush_interval", "positive"),
        "timeout": ("batch_timeout", "positive"),
        "max_setting_bytes": ("batch_max_setting_bytes", "setting_bytes"),
    },
    "worker": {
        "bind": ("worker_bind", "str"),
        "port": ("worker_port", "port"),
        "username": ("worker_username", "str"),
        "password": ("worker_password", "str"),
        "project": ("worker_project", "name"),
        "node_name": ("worker_node_name", "str"),
        "max_jobs": ("worker_max_jobs", "positive_int"),
        "concurrency": ("worker_concurrency", "count"),
        "job_concurrency": ("worker_job_concurrency", "count"),
        "redirect_window": ("worker_redirect_window", "non_negative"),
        "max_job_urls": ("worker_max_job_urls", "positive_int"),
        "feed_template": ("worker_feed_template", "feed_template"),
        "feed_dirs": ("worker_feed_dirs", "abs_dirs"),
        "stop_timeout": ("worker_stop_timeout", "non_negative"),
        "finished_to_keep": ("worker_finished_to_keep", "count"),
    },
    "feed": {
        "retry_max": ("feed_retry_max", "positive"),
        "stop_timeout": ("feed_stop_timeout", "non_negative"),
    },
    "api": {
        "bind": ("api_bind", "str"),
        "port": ("api_port", "api_port"),
        "token": ("api_token", "token"),
        "username": ("api_username", "str"),
        "password": ("api_password", "str"),
    },
    "store": {
        "url": ("store_url", "store_url"),
        "compression_preset": ("store_preset", "preset"),
        "batch_size": ("store_batch_size", "positive_int"),
    },
    "items": {
        "dir": ("items_dir", "str"),
        "rotate_count": ("items_rotate_count", "positive_int"),
        "format": ("items_format", "feed_format"),  # "jsonl", "warc" (the fetched answers, warcio) or "both"
        "warc_rotate_mb": ("warc_rotate_mb", "positive_int"),
        "skip_duplicate_content": ("skip_duplicate_content", "bool"),  # mirror pages: one item per content digest
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
}


def describe() -> dict[str, list[str]]:
    """The known keys per section (for error messages and docs)."""
    known = {section: list(keys) for section, keys in SCHEMA.items()}
    known["sites"] = sorted(SITE_KEYS)
    return known

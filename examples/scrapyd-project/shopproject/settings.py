"""Scrapy settings of the project.  Scrapyd adds LOG_FILE, and spiderd's batcher adds FEED_URI and
DISTRIBUTED_START_URLS to every job."""

import os

BOT_NAME = "shopproject"
SPIDER_MODULES = ["shopproject.spiders"]
NEWSPIDER_MODULE = "shopproject.spiders"

# The spiderd configuration whose [[sites]] rules (hosts, detail URLs, fields) the spiders apply:
# the frontier's own file, or a copy of it on each Scrapyd node.
SPIDERD_CONFIG = os.environ.get("SPIDERD_CONFIG", "/etc/spiderd/spiderd.toml")

# Be as polite as spiderd's own fetcher.
ROBOTSTXT_OBEY = True
CONCURRENT_REQUESTS = 16
CONCURRENT_REQUESTS_PER_DOMAIN = 8

# Feed lines as spiderd writes them (FEED_URI defaults to JSON lines): UTF-8 (not \u escapes).
FEED_EXPORT_ENCODING = "utf-8"

LOG_LEVEL = "INFO"

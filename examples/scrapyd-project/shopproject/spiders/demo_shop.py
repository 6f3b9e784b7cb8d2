"""The demo shop's spider: start URLs from DISTRIBUTED_START_URLS, items by the site's rules in SPIDERD_CONFIG."""

from spiderd.contrib.scrapy import DistributedSpider


class DemoShopSpider(DistributedSpider):
    """Works batches for the ``[[sites]]`` entry named ``demo-shop``."""

    name = "demo-shop"

"""A minimal Scrapy project whose spiders work spiderd's batches (spiderd.contrib.scrapy)."""

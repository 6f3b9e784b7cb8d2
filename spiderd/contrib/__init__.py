"""Optional integrations with other software; each module imports its own dependencies.

``spiderd.contrib.scrapy`` needs Scrapy (``pip install spiderd[scrapy]``); importing
``spiderd`` or this package never imports it.
"""

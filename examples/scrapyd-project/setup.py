"""Builds the egg Scrapyd runs: ``python setup.py bdist_egg`` (scrapyd-deploy uses this file too)."""

from setuptools import find_packages, setup

setup(
    name="shopproject",
    version="1.0",
    packages=find_packages(),
    entry_points={"scrapy": ["settings = shopproject.settings"]},
)

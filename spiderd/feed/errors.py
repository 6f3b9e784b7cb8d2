"""The feed's errors: a file that could not be shipped, a file that is not clean JSON lines, a final name
already taken at the target."""

from __future__ import annotations


class FeedError(Exception):
    """A feed file could not be shipped."""


class BadFeedError(FeedError, ValueError):
    """The file is not JSON lines Spark reads without a corrupt record."""


class FeedExistsError(FeedError):
    """The final name already exists at the target; it is never overwritten."""

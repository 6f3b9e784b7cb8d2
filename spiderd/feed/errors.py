"""The feed's errors: a file that could not be shipped, a file that is not clean JSON lines, a final name
already taken at the target, a host whose certificate or host key does not check."""

from __future__ import annotations


class FeedError(Exception):
    """A feed file could not be shipped."""


class BadFeedError(FeedError, ValueError):
    """The file is not JSON lines Spark reads without a corrupt record."""


class FeedExistsError(FeedError):
    """The final name already exists at the target; it is never overwritten."""


class FeedTrustError(FeedError, ValueError):
    """The host is not proven to be the configured one: its TLS certificate does not verify, or its SSH host key is
    unknown or changed.  Refused at start; at run time the file stays spooled and the error shows."""

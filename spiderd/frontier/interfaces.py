"""The whole pool's contract, for the frontier modules that still take all of it (the crawler, its processor and
their factory, until they type against the narrow contracts of :mod:`spiderd.contracts.pool`)."""

from spiderd.contracts.pool import IURLPool, IURLPoolAdmin

__all__ = ["IURLPool", "IURLPoolAdmin"]

"""spiderd: a crawler daemon on Twisted."""

__version__ = "0.1.0"

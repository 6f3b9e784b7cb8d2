"""Operating a node: the HTTP API, metrics and status page, spiderctl, systemd, logs and reload."""

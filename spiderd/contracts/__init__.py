"""Contracts between the node's parts that no role owns: each consumer depends on the narrow one it uses.

- :mod:`.pool`: what the URL pool offers, cut by consumer (statuses and pops, checkpoints, the batch ledger,
  claims, seeds, recrawl, admin ...); the backends (spiderd.frontier.pool) provide all of them.

The package imports only spiderd.core, so a part (feed, fetch, store) or a role (frontier, worker) may use it
without importing another role.
"""

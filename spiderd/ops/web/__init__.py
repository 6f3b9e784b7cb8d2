"""The HTTP API of a node: JSON status and admin endpoints, Prometheus metrics, a status page.

- :mod:`.service`: :class:`ApiService` (listening, the history sampler) and its ``Site``;
- :mod:`.api`: the endpoints; :mod:`.auth`: bearer token and basic auth;
- :mod:`.node`: the parts of a node, the status and "why" answers; :mod:`.history`: the last hour;
- :mod:`.metrics`: the Prometheus registry; :mod:`.streams`: the pool's export and import as JSON lines;
- ``status.html``: the status page, self-contained (no CDN, no other file).
"""

from spiderd.core.net.auth import Auth
from spiderd.ops.web.node import Node
from spiderd.ops.web.service import ApiService, api_service

__all__ = ["ApiService", "Auth", "Node", "api_service"]

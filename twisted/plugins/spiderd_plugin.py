"""twistd plugin: names the service maker only; the wiring lives in spiderd.tap."""

from twisted.application.service import ServiceMaker

spiderd = ServiceMaker(
    "spiderd", "spiderd.tap", "A crawler daemon: URL pool, fetch loop, batches to workers.", "spiderd"
)

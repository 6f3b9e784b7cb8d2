"""The Grafana dashboard (examples/grafana/spiderd-dashboard.json) asks only for metrics a node exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from .webnode import make_node, start_api

DASHBOARD = Path(__file__).resolve().parent.parent / "examples" / "grafana" / "spiderd-dashboard.json"


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


class DashboardTests(TestCase):
    def setUp(self) -> None:
        self.dashboard = json.loads(DASHBOARD.read_text())

    @defer.inlineCallbacks
    def test_every_query_names_an_exposed_metric(self) -> Any:
        """Each series a panel queries is one a node's /metrics has (an all-role node, every part present)."""
        clock = Clock()
        node = make_node(clock)
        api = start_api(reactor, node, clock)
        self.addCleanup(api.stopService)
        node.stats.fetched(200, 500, 0.3)
        node.stats.fetched(-4, 0, 30.0)  # a timeout: the errors family has a sample
        clock.advance(0.1)  # one reactor-lag sample
        text = (yield api.metrics.render()).decode()
        exposed = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
        asked = {name for e in exprs(self.dashboard) for name in re.findall(r"\bspiderd_[a-z_]+", e)}
        asked |= {"spiderd_info"}  # the node variable's query
        assert asked - exposed == set(), sorted(asked - exposed)
        assert len(asked) >= 15

    def test_importable_as_it_is(self) -> None:
        """A datasource input to pick at import, unique panel ids, panels that do not overlap, the node variable."""
        d = self.dashboard
        assert [i["name"] for i in d["__inputs"]] == ["DS_PROMETHEUS"]
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids))
        assert all(p["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in d["panels"])
        cells = set()
        for p in d["panels"]:
            g = p["gridPos"]
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    assert (x, y) not in cells, p["title"]
                    cells.add((x, y))
            assert g["x"] + g["w"] <= 24
        assert d["templating"]["list"][0]["name"] == "instance"
        assert all("$instance" in e for e in exprs(d))

"""A small shop whose pages are built by JavaScript, served by twisted.web on 127.0.0.1 (the render tests, and
bench/render.py): list pages write their detail links with a script, detail pages fill their title and price from
an XHR to a JSON endpoint; images are linked (and counted, so a test can show they were not loaded)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Callable

from twisted.web import resource

LIST_JS = b"""
var n = parseInt(document.body.dataset.first), count = parseInt(document.body.dataset.count);
var out = "";
for (var i = n; i < n + count; i++) { out += '<a href="/p/' + i + '">product ' + i + '</a> '; }
document.getElementById("list").innerHTML = out;
"""
DETAIL_JS = b"""
var id = document.body.dataset.id;
fetch("/api/p/" + id + ".json").then(function (r) { return r.json(); }).then(function (p) {
  document.getElementById("title").textContent = p.title;
  document.getElementById("price").textContent = p.price;
});
"""
SITE = {"name": "shop", "allowed_hosts": ["127.0.0.1"], "list_urls": [r"/(list/\d+)?$"], "detail_urls": [r"/p/\d+$"],
        "fields": {"title": "//h1/text()", "price": "//span[@id='price']/text()"}}


def shop_site(render: str = "always", **extra: Any) -> dict[str, Any]:
    """The shop's [[sites]] table with ``render``."""
    return {**SITE, "render": render, **extra}


class Shop(resource.Resource):
    """``/`` links ``lists`` list pages by script... each list page writes ``per_list`` detail links; ``/p/N`` fills
    its fields from ``/api/p/N.json``; ``pages`` (path -> handler) adds or replaces pages (hostile ones)."""

    isLeaf = True

    def __init__(self, lists: int = 1, per_list: int = 5, plain: bool = False) -> None:
        super().__init__()
        self.lists, self.per_list, self.plain = lists, per_list, plain
        self.requests: Counter[str] = Counter()
        self.pages: dict[str, Callable[[Any], bytes | int]] = {}
        self.robots = b""

    @property
    def details(self) -> int:
        return self.lists * self.per_list

    def render_GET(self, request: Any) -> bytes | int:
        path = request.path.decode()
        self.requests[path] += 1
        if path in self.pages:
            return self.pages[path](request)
        if path == "/robots.txt":
            request.setHeader(b"content-type", b"text/plain")
            return self.robots
        if path.endswith(".js"):
            request.setHeader(b"content-type", b"application/javascript")
            return LIST_JS if path == "/static/list.js" else DETAIL_JS
        if path.startswith("/api/p/"):
            n = path[len("/api/p/"):-len(".json")]
            request.setHeader(b"content-type", b"application/json")
            return json.dumps({"title": f"Product {n}", "price": f"{n}.99"}).encode()
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        if path == "/" or path.startswith("/list/"):
            number = 0 if path == "/" else int(path.rsplit("/", 1)[1])
            return self._list(number)
        if path.startswith("/p/"):
            return self._detail(path.rsplit("/", 1)[1])
        request.setResponseCode(404)
        return b"no such page"

    def _list(self, number: int) -> bytes:
        if number == 0 and self.lists > 1:
            links = "".join(f'<a href="/list/{i}">list {i}</a> ' for i in range(1, self.lists + 1))
            return f"<html><body>{links}</body></html>".encode()
        first = (max(number, 1) - 1) * self.per_list + 1
        if self.plain:
            links = "".join(f'<a href="/p/{i}">product {i}</a> ' for i in range(first, first + self.per_list))
            return f"<html><body><div id='list'>{links}</div></body></html>".encode()
        return (f'<html><body data-first="{first}" data-count="{self.per_list}"><div id="list"></div>'
                '<script src="/static/list.js"></script></body></html>').encode()

    def _detail(self, n: str) -> bytes:
        if self.plain:
            return (f"<html><body><h1>Product {n}</h1><span id='price'>{n}.99</span>"
                    f"<img src='/img/{n}.png'></body></html>").encode()
        return (f'<html><body data-id="{n}"><h1 id="title"></h1><span id="price"></span><img src="/img/{n}.png">'
                '<script src="/static/detail.js"></script></body></html>').encode()

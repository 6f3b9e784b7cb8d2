"""Issue 14's hostile inputs as a table: each request, the answer it must get, and the node still answering.

One real node (role "all", its local worker taking the batches of 20) runs on the real reactor on
127.0.0.1 for the whole table; each row is one pytest test named after the row.  A row is sent as raw
bytes (so a lying Host, Origin or Content-Length goes out as written) and must get its status code and
its words; then ``GET /api/status`` must answer 200.  Every answer, whatever the row: no 500, no
traceback, no ``Access-Control-Allow-Origin``, and nothing logged as a failure while the row ran.

The worker runs one job at a time, and the first is held on a slow page of the demo site (its clock
never moves), so every job the rows schedule stays pending: ``listjobs.json`` shows their settings and
the worker fetches nothing else.  Rows run in order; a row may rely on the rows above it (the add after
the 10,000, the listing after the scheduled passwords).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Iterator
from urllib.parse import urlencode

import pytest
from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.logger import formatEvent, globalLogPublisher

from spiderd.config import settings as cfg
from spiderd import tap
from spiderd.demo.config import DEMO
from spiderd.demo.pages import SiteSpec
from spiderd.demo.site import listen, port_of
from spiderd.core.lifecycle import wait_until
from spiderd.config.convert import MAX_SECONDS
from spiderd.ops.web.api import MAX_JSON_BODY, MAX_URLS

from .test_worker import Gate

SITE, FEEDS = "{site}", "{feeds}"  # replaced, in every string of a row, by the demo site's root and a feed directory
# an empty URL list, so that a schedule without URLs is not refused for that (a row's own URLs come after it)
SCHEDULE = [("project", "spiderd"), ("spider", "demo-shop"), ("setting", "DISTRIBUTED_START_URLS=[]")]
MAX_JOB_URLS = cfg.from_dict({}, "<defaults>").worker.max_job_urls  # 50,000: the table's node keeps the default
ODD_PASSWORDS = {"space": "pa ssLEAK2", "quote": "it'sLEAK", "backslash": "back\\LEAK", "dquote": 'q"LEAK',
                 "lt": "<LEAK>"}


@dataclass(frozen=True)
class Row:
    """One request and the answer it must get (``says``: words in the answer; ``never``: text in neither the
    answer nor the node's log while the row runs; ``fields``: values of the JSON answer)."""

    name: str
    api: str  # "node" (/api/...) or "worker" (Scrapyd's API)
    method: str
    path: str
    body: Any = None  # bytes as sent; for the node a JSON value, for the worker form pairs; or a callable making one
    code: int = 200
    says: str = ""
    never: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = ()


def node(name: str, method: str, path: str, body: Any = None, code: int = 200, says: str = "", **kw: Any) -> Row:
    return Row(name, "node", method, path, body, code, says, **kw)


def worker(name: str, method: str, path: str, body: Any = None, code: int = 200, says: str = "", **kw: Any) -> Row:
    return Row(name, "worker", method, path, body, code, says, **kw)


def refused(name: str, *pairs: tuple[str, str], says: str, **kw: Any) -> Row:
    """A schedule.json the worker refuses as Scrapyd does: 200 and status error, with ``says`` in the message."""
    return worker(name, "POST", "/schedule.json", SCHEDULE + list(pairs), 200, says, fields={"status": "error"}, **kw)


def feed(uri: str) -> tuple[str, str]:
    return ("setting", "FEED_URI=" + uri)


def start_urls(urls: list[str]) -> tuple[str, str]:
    return ("setting", "DISTRIBUTED_START_URLS=" + json.dumps(urls))


def details(count: int, first: int = 100_000) -> list[str]:
    """Detail URLs of the demo site that no page links (and no job of the table fetches)."""
    return [f"{SITE}/item/{first + i}.html" for i in range(count)]


def huge_job() -> list[tuple[str, str]]:
    """A 12 MB schedule.json of 200,000 start URLs."""
    urls = [f"http://127.0.0.1/item/{i:012d}-{'x' * 20}.html" for i in range(200_000)]
    return SCHEDULE + [start_urls(urls)]


def hub(span: Any) -> bytes:
    """A hubs body with ``span`` written into the JSON as it is (1e400 and NaN are not JSON values Python writes)."""
    return b'{"urls": ["%s/hub-gone"], "refresh_span": %s}' % (SITE.encode(), str(span).encode())


ROWS = [
    # 1: many small batches in one add; the node answers, and the next add too
    node("urls_10000_details_in_batches_of_20", "POST", "/api/urls",
         lambda: {"urls": details(10_000), "kind": "detail"}, fields={"added": 10_000, "kind": "detail"}),
    node("urls_detail_add_after_the_10000", "POST", "/api/urls", {"urls": details(1, 0), "kind": "detail"},
         fields={"added": 1}),
    node("urls_10000_known_details_again", "POST", "/api/urls", lambda: {"urls": details(10_000), "kind": "detail"},
         fields={"added": 0, "known": 10_000}),
    node("urls_over_the_per_request_cap", "POST", "/api/urls", lambda: {"urls": details(MAX_URLS + 1)}, 400,
         f"at most {MAX_URLS} URLs per request"),
    # 2: numbers from a request are range-checked
    node("hubs_refresh_span_1e400", "POST", "/api/hubs", hub("1e400"), 400, "'refresh_span' must be a number"),
    node("hubs_refresh_span_nan", "POST", "/api/hubs", hub("NaN"), 400, "'refresh_span' must be a number"),
    node("hubs_refresh_span_infinity", "POST", "/api/hubs", hub("-Infinity"), 400, "'refresh_span' must be"),
    node("hubs_refresh_span_minus_1", "POST", "/api/hubs", hub(-1), 400, "'refresh_span' must be a number"),
    node("hubs_refresh_span_zero", "POST", "/api/hubs", hub(0), 400, "'refresh_span' must be a number"),
    node("hubs_refresh_span_string", "POST", "/api/hubs", hub('"x"'), 400, "'refresh_span' must be a number"),
    node("hubs_refresh_span_true", "POST", "/api/hubs", hub("true"), 400, "'refresh_span' must be a number"),
    node("hubs_refresh_span_over_max", "POST", "/api/hubs", hub(MAX_SECONDS * 10), 400, "at most 1e+09"),
    node("hubs_refresh_span_max", "POST", "/api/hubs", hub(int(MAX_SECONDS)), fields={"added": 1}),
    # 3: FEED_URI templates: no width or precision, no name longer than a file system takes
    refused("feed_width_200000000", feed(f"file://{FEEDS}/%(batch)200000000s.jl"), says="only %(key)s parameters"),
    refused("feed_precision", feed(f"file://{FEEDS}/%(batch).99999999s.jl"), says="only %(key)s parameters"),
    refused("feed_zero_padded_number", feed(f"file://{FEEDS}/%(batch)05d.jl"), says="only %(key)s parameters"),
    refused("feed_unknown_placeholder", feed(f"file://{FEEDS}/%(nope)s.jl"), says="needs the parameter 'nope'"),
    refused("feed_name_over_255_bytes", feed(f"file://{FEEDS}/{'n' * 300}.jl"),
            says="renders a name longer than a file system takes"),
    refused("feed_batch_over_255_bytes", feed(f"file://{FEEDS}/%(batch)s.jl"), ("batch", "b" * 300),
            says="renders a name longer than a file system takes"),
    refused("feed_batch_leaves_its_directory", ("batch", "../../x"), says="batch is invalid"),
    refused("jobid_over_128", ("jobid", "j" * 129), says="jobid is invalid"),
    refused("jobid_traversal", ("jobid", "../jobs/x"), says="jobid is invalid"),
    worker("spider_name_10000_chars", "POST", "/schedule.json", [("project", "spiderd"), ("spider", "s" * 10_000)],
           says="not found", fields={"status": "error"}),
    # 4: URLs per job capped (worker.max_job_urls, 50,000 by default)
    worker("schedule_200000_urls_12_mb", "POST", "/schedule.json", huge_job,
           says=f"200000 URLs, at most {MAX_JOB_URLS} in one job (worker.max_job_urls)", fields={"status": "error"}),
    # 6: a FEED_URI password is never shown, whatever it holds
    *[worker(f"feed_password_with_{kind}", "POST", "/schedule.json",
             SCHEDULE + [feed(f"ftp://feeduser:{secret}@127.0.0.1:2121/in/%(batch)s.jl")], never="LEAK",
             fields={"status": "ok"}) for kind, secret in ODD_PASSWORDS.items()],
    worker("listjobs_masks_every_feed_password", "GET", "/listjobs.json",
           says="ftp://feeduser:***@127.0.0.1:2121/in/%(batch)s.jl", never="LEAK"),
    worker("jobs_page_shows_no_feed_password", "GET", "/jobs", None, 200, "demo-shop", never="LEAK"),
    refused("feed_password_in_a_refusal", feed("http://feeduser:pa ssLEAK2@127.0.0.1/%(batch)s.jl"),
            says="expected a file://, ftp://, ftps:// or sftp:// URI", never="LEAK"),
    # 7: the worker's API refuses other web origins and host names, as /api does
    worker("schedule_from_another_origin", "POST", "/schedule.json", SCHEDULE, 403, "cross-origin request refused",
           headers=(("Origin", "http://evil.example"),)),
    worker("worker_status_for_another_host", "GET", "/daemonstatus.json", None, 403, "loopback host name",
           headers=(("Host", "evil.example"),)),
    worker("schedule_for_another_host", "POST", "/schedule.json", SCHEDULE, 403, "loopback host name",
           headers=(("Host", "evil.example:6800"),)),
    worker("worker_preflight", "OPTIONS", "/schedule.json", None, 204, headers=(("Origin", "http://evil.example"),)),
    node("api_pause_from_another_origin", "POST", "/api/pause", None, 403, "cross-origin request refused",
         headers=(("Origin", "http://evil.example"),)),
    node("api_status_for_another_host", "GET", "/api/status", None, 403, "loopback host name",
         headers=(("Host", "evil.example"),)),
    node("api_pause_from_origin_null", "POST", "/api/pause", None, 403, "cross-origin request refused",
         headers=(("Origin", "null"),)),
    node("api_host_with_nul", "GET", "/api/status", None, 400, headers=(("Host", "127.0.0.1\x00.evil.example"),)),
    node("absolute_uri_of_another_host", "GET", "http://evil.example/api/status", None, 404, "no such endpoint"),
    # 8: no writing through a symbolic link out of the feed directories
    refused("feed_through_a_symlink_out", feed(f"file://{FEEDS}/link2/escaped.jl"),
            says="writes outside this worker's feed directories"),
    refused("feed_outside_the_feed_dirs", feed("file:///etc/cron.d/%(batch)s"),
            says="writes outside this worker's feed directories"),
    # 9, 10: URLs with a password, a NUL in the host, a lone surrogate; JSON nested too deeply
    node("urls_with_a_password", "POST", "/api/urls", {"urls": ["http://user:secretpw@127.0.0.1/list/1.html"]},
         says="credentials", never="secretpw", fields={"added": 0}),
    node("detail_urls_with_a_password", "POST", "/api/urls",
         {"urls": ["http://user:secretpw@127.0.0.1/item/1.html"], "kind": "detail"}, says="credentials",
         never="secretpw", fields={"added": 0}),
    node("urls_nul_in_host", "POST", "/api/urls", {"urls": ["http://127.0.0.1\x00.evil.com/"]}, says="bad-host",
         fields={"added": 0}),
    node("urls_lone_surrogate", "POST", "/api/urls", b'{"urls": ["http://127.0.0.1/\\ud800"]}', says="unparseable",
         fields={"added": 0}),
    node("seeds_lone_surrogate_and_a_good_one", "POST", "/api/seeds",
         b'{"urls": ["http://127.0.0.1/\\udfff", "%s/seed-gone"]}' % SITE.encode(), says="unparseable",
         fields={"added": 1}),
    node("why_url_with_a_password", "GET", "/api/why?url=http://user:secretpw@127.0.0.1/", says="credentials",
         never="secretpw"),
    node("hubs_with_a_password", "POST", "/api/hubs", {"urls": ["http://user:secretpw@127.0.0.1/"]},
         says="credentials", never="secretpw", fields={"added": 0}),
    node("why_nul_in_host", "GET", "/api/why?url=http://127.0.0.1%00.evil/", says="bad-host"),
    node("urls_port_99999", "POST", "/api/urls", {"urls": ["http://127.0.0.1:99999/list/1.html"]},
         fields={"rejected": [{"url": "http://127.0.0.1:99999/list/1.html", "reason": "bad-port"}]}),
    node("urls_over_max_url_length", "POST", "/api/urls", {"urls": ["http://127.0.0.1/" + "a" * 10_000]},
         says="too-long", fields={"added": 0}),
    node("import_url_with_a_password", "POST", "/api/import", b'{"url": "http://user:secretpw@127.0.0.1/"}\n',
         never="secretpw", fields={"queued": 0, "rejected_count": 1}),
    node("export_shows_no_password", "GET", "/api/export", None, 200, never="secretpw"),
    worker("start_url_with_a_password", "POST", "/schedule.json",
           SCHEDULE + [start_urls(["http://user:secretpw@127.0.0.1/item/1.html"])], says="credentials",
           never="secretpw", fields={"status": "error"}),
    worker("start_url_nul_in_host", "POST", "/schedule.json", SCHEDULE + [start_urls(["http://127.0.0.1\x00.x/"])],
           says="bad-host", fields={"status": "error"}),
    refused("start_url_lone_surrogate", ("setting", 'DISTRIBUTED_START_URLS=["http://127.0.0.1/\\ud800"]'),
            says="unparseable"),
    refused("start_url_port_99999", start_urls(["http://127.0.0.1:99999/item/1.html"]), says="bad-port"),
    worker("setting_not_utf8", "POST", "/schedule.json",
           b"project=spiderd&spider=demo-shop&setting=DISTRIBUTED_START_URLS%3D%5B%22http%3A%2F%2F127.0.0.1%2F%ED%A0%80",
           says="setting is invalid", fields={"status": "error"}),
    node("urls_nested_100000_deep", "POST", "/api/urls", b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
    node("urls_object_nested_100000_deep", "POST", "/api/urls", b'{"urls": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
         400, "nested too deeply"),
    worker("start_urls_nested_100000_deep", "POST", "/schedule.json",
           SCHEDULE + [("setting", "DISTRIBUTED_START_URLS=" + "[" * 100_000 + "]" * 100_000)],
           says="DISTRIBUTED_START_URLS is invalid: not JSON (nested too deeply)", fields={"status": "error"}),
    refused("feeds_nested_100000_deep", ("setting", "FEEDS=" + "[" * 100_000 + "]" * 100_000),
            says="FEEDS is invalid: not JSON (nested too deeply)"),
    node("import_line_nested_100000_deep", "POST", "/api/import", b"[" * 100_000 + b"]" * 100_000 + b"\n",
         says="not JSON: nested too deeply", fields={"rejected_count": 1}),
    # missing fields, wrong types, bad JSON, oversize bodies, wrong methods: the node's API
    node("urls_missing", "POST", "/api/urls", {}, 400, "'urls' is required"),
    node("urls_empty_body", "POST", "/api/urls", b"", 400, "must be a JSON object"),
    node("urls_not_a_list", "POST", "/api/urls", {"urls": "http://127.0.0.1/"}, 400, "a non-empty list"),
    node("urls_not_strings", "POST", "/api/urls", {"urls": [1, None, ["x"], {"u": 1}]}, says="not-a-string",
         fields={"added": 0}),
    node("urls_kind_unknown", "POST", "/api/urls", {"urls": ["http://127.0.0.1/"], "kind": "hub"}, 400,
         "'kind' must be"),
    node("urls_kind_a_list", "POST", "/api/urls", {"urls": ["http://127.0.0.1/"], "kind": ["detail"]}, 400,
         "'kind' must be"),
    node("urls_recrawl_a_string", "POST", "/api/urls", {"urls": ["http://127.0.0.1/"], "recrawl": "yes"}, 400,
         "true or false"),
    node("urls_unknown_field", "POST", "/api/urls", {"urls": ["http://127.0.0.1/"], "colour": 1}, 400,
         "unknown field 'colour'"),
    node("urls_body_a_list", "POST", "/api/urls", ["http://127.0.0.1/"], 400, "must be a JSON object"),
    node("urls_bad_json", "POST", "/api/urls", b'{"urls": [', 400, "not valid JSON"),
    node("urls_not_utf8", "POST", "/api/urls", b'{"urls": ["\xff"]}', 400, "not valid JSON"),
    node("urls_body_over_1_mib", "POST", "/api/urls", b'{"urls": ["' + b"x" * MAX_JSON_BODY + b'"]}', 413,
         "too large"),
    node("why_url_over_16_kib", "GET", "/api/why?url=http://127.0.0.1/" + "a" * 20_000, None, 414,
         "request line too long"),
    node("header_over_16_kib", "GET", "/api/status", None, 431, "header line too long",
         headers=(("X-Long", "a" * 20_000),)),
    node("headers_over_500", "GET", "/api/status", None, 400, headers=tuple((f"X-{i}", "a") for i in range(600))),
    node("content_length_negative", "POST", "/api/urls", b"", 400, headers=(("Content-Length", "-1"),)),
    node("content_length_twice", "POST", "/api/urls", b"{}", 400,
         headers=(("Content-Length", "2"), ("Content-Length", "3"))),
    node("import_line_not_utf8", "POST", "/api/import", b'{"url": "\xff"}\n', says="not JSON",
         fields={"rejected_count": 1}),
    node("detail_urls_recrawl_in_batches", "POST", "/api/urls",
         {"urls": ["http://127.0.0.1/item/1.html"], "kind": "detail", "recrawl": True}, 400, "not possible"),
    node("import_declares_64_mib", "POST", "/api/import", b"{}", 413, "request body too large",
         headers=(("Content-Length", str(64 * 1024 * 1024)),)),
    node("why_without_url", "GET", "/api/why", None, 400, "'url' query parameter is required"),
    node("why_not_utf8", "GET", "/api/why?url=%ff", None, 400, "not UTF-8"),
    node("urls_by_get", "GET", "/api/urls", None, 405, "GET not allowed on /api/urls: use POST"),
    node("status_by_post", "POST", "/api/status", {}, 405, "use GET"),
    node("hubs_by_put", "PUT", "/api/hubs", {}, 405, "use POST"),
    node("status_by_delete", "DELETE", "/api/status", None, 405, "use GET"),
    node("status_by_unknown_method", "FOO", "/api/status", None, 405, "use GET"),
    node("unknown_endpoint", "GET", "/api/../etc/passwd", None, 404, "no such endpoint"),
    # ... and the worker's
    worker("schedule_without_project", "POST", "/schedule.json", [], says="'project' parameter is required",
           fields={"status": "error"}),
    worker("schedule_without_spider", "POST", "/schedule.json", [("project", "spiderd")],
           says="'spider' parameter is required", fields={"status": "error"}),
    worker("schedule_project_not_utf8", "POST", "/schedule.json", b"project=%ff&spider=demo-shop",
           says="project is invalid", fields={"status": "error"}),
    refused("schedule_priority_nan", ("priority", "nan"), says="priority is invalid"),
    refused("schedule_priority_1e400", ("priority", "1e400"), says="priority is invalid"),
    refused("download_delay_nan", ("setting", "DOWNLOAD_DELAY=nan"), says="DOWNLOAD_DELAY is invalid"),
    refused("download_delay_1e400", ("setting", "DOWNLOAD_DELAY=1e400"), says="DOWNLOAD_DELAY is invalid"),
    refused("user_agent_with_crlf", ("setting", "USER_AGENT=a\r\nX-Evil: 1"), says="USER_AGENT is invalid"),
    worker("schedule_20000_unknown_settings", "POST", "/schedule.json",
           SCHEDULE + [("setting", f"X{i}=1") for i in range(20_000)], fields={"status": "ok"}),
    refused("schedule_setting_without_value", ("setting", "NOEQUALS"), says="is not NAME=VALUE"),
    refused("start_urls_not_json", ("setting", "DISTRIBUTED_START_URLS=[\"http://x/\""), says="not JSON"),
    refused("start_urls_not_a_list", ("setting", "DISTRIBUTED_START_URLS={\"a\": 1}"), says="expected a JSON list"),
    refused("concurrency_zero", ("setting", "CONCURRENT_REQUESTS=0"), says="CONCURRENT_REQUESTS is invalid"),
    worker("schedule_declares_1_gb", "POST", "/schedule.json", b"project=spiderd", 413,
           "request body too large", headers=(("Content-Length", str(1024 ** 3)),)),
    worker("schedule_bad_multipart", "POST", "/schedule.json", b"garbage", 400, "multipart",
           headers=(("Content-Type", "multipart/form-data; boundary=xyz"),)),
    worker("schedule_by_get", "GET", "/schedule.json", None, says="UnsupportedMethod", fields={"status": "error"}),
    worker("listjobs_by_post", "POST", "/listjobs.json", [], says="UnsupportedMethod", fields={"status": "error"}),
    worker("listjobs_by_delete", "DELETE", "/listjobs.json", None, says="UnsupportedMethod", fields={"status": "error"}),
    refused("jobid_with_nul", ("jobid", "x\x00y"), says="jobid is invalid"),
    worker("worker_request_line_over_16_kib", "GET", "/status.json?job=" + "x" * 20_000, None, 414,
           "request line too long"),
    worker("cancel_without_job", "POST", "/cancel.json", [("project", "spiderd")], says="'job' parameter is required",
           fields={"status": "error"}),
    worker("status_without_job", "GET", "/status.json", None, says="'job' parameter is required",
           fields={"status": "error"}),
    worker("worker_unknown_endpoint", "GET", "/nope.json", None, 404, "No such resource"),
    worker("worker_log_traversal", "GET", "/logs/spiderd/demo-shop/..%2f..%2f..%2fetc%2fpasswd", None, 404),
    # 12: a client's mistake is one line of JSON, never a traceback (checked on every row)
    worker("addversion_without_egg", "POST", "/addversion.json", [("project", "spiderd"), ("version", "r1")],
           says="'egg' parameter is required", fields={"status": "error"}),
]


# -- the node -------------------------------------------------------------------------------------------------


@dataclass
class Node:
    """The running node, and what rows need of it."""

    ports: dict[str, int]
    names: dict[str, str]  # {site} and {feeds}
    failures: list[str] = field(default_factory=list)  # log events with a failure (a traceback)
    lines: list[str] = field(default_factory=list)  # every log line (to look for leaked secrets)

    def observe(self, event: dict[str, Any]) -> None:
        text = formatEvent(event)
        if "log_failure" in event:
            text += "\n" + event["log_failure"].getTraceback()
            self.failures.append(text)
        self.lines.append(text)


def spin(d: Deferred[Any], timeout: float = 120.0) -> Any:
    """Run the reactor until ``d`` fires, as trial runs a test's Deferred (a crash, not a stop, ends the run, so
    the reactor runs again later); its result, or its failure raised.  ``d`` is cancelled after ``timeout``."""
    box: list[Any] = []
    d.addBoth(box.append)
    if not box:
        late = reactor.callLater(timeout, d.cancel)
        d.addBoth(lambda _: reactor.crash())
        reactor.run()
        if late.active():
            late.cancel()
    assert box, "the reactor stopped before the answer came"
    result = box[0]
    if hasattr(result, "raiseException"):
        result.raiseException()
    return result


def settings(data: str, feeds: str) -> cfg.Settings:
    """An "all" node whose detail URLs go in batches of 20 to its own worker, which runs one job at a time."""
    return cfg.from_dict({
        "spiderd": {"data_dir": data, "log_interval": 3600},
        "fetch": {"robots": False, "timeout": 120},
        "parse": {"workers": 0},
        "batch": {"targets": ["local"], "size": 20, "flush_interval": 5},
        "worker": {"port": 0, "max_jobs": 1, "feed_dirs": [feeds], "stop_timeout": 0},
        "api": {"port": 0},
        "sites": DEMO["sites"],
    }, "<hostile table>")


@pytest.fixture(scope="module")
def running() -> Iterator[Node]:
    """The node, its first job held on a slow page; stopped (and its files removed) after the last row."""
    tmp = tempfile.mkdtemp(prefix="spiderd-hostile-table-")
    feeds, outside = os.path.join(tmp, "feeds"), os.path.join(tmp, "outside")
    os.makedirs(feeds)
    os.makedirs(outside)
    os.symlink(outside, os.path.join(feeds, "link2"))
    spec, gate = SiteSpec(lists=2, details=40), Gate()
    site = listen(spec, reactor, clock=gate)
    top = tap.build(settings(os.path.join(tmp, "data"), feeds), reactor)
    top.startService()
    api, work = top.getServiceNamed("api"), top.getServiceNamed("worker")
    spin(wait_until(reactor, lambda: api.running, 0.01))  # the services after the pool start once it is ready
    root = f"http://127.0.0.1:{port_of(site)}"
    up = Node({"node": api.address[1], "worker": work.address[1]}, {SITE: root, FEEDS: feeds})
    held = min(spec.expected().slow)
    answer = spin(request(up.ports["worker"], "POST", "/schedule.json", form(SCHEDULE + [start_urls([root + held])]),
                          (("Content-Type", "application/x-www-form-urlencoded"),)))
    assert json.loads(answer.body)["status"] == "ok", answer.body
    spin(gate.arrival(1))
    globalLogPublisher.addObserver(up.observe)
    try:
        yield up
    finally:
        globalLogPublisher.removeObserver(up.observe)
        spin(defer.maybeDeferred(top.stopService))
        spin(defer.maybeDeferred(site.stopListening))
        end_reactor_threads()
        shutil.rmtree(tmp, True)


def end_reactor_threads() -> None:
    """End the reactor's pool threads (name lookups ran there): the reactor is crashed, never stopped, so its
    shutdown never stops them, and they would keep the process from exiting.  Public calls only: the pool shrinks
    to no thread, then may grow again for whoever uses the reactor next."""
    pool = reactor.getThreadPool()
    size = pool.max
    reactor.suggestThreadPoolSize(0)
    reactor.suggestThreadPoolSize(size)
    for thread in list(pool.threads):
        thread.join(30)
        assert not thread.is_alive(), f"the reactor's pool thread {thread.name} did not end"


# -- sending a row -------------------------------------------------------------------------------------------


@dataclass
class Answer:
    code: int
    headers: dict[str, list[str]]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def text(self) -> str:
        """The body as text, and the message of a JSON error as written (not \\u-escaped)."""
        decoded = self.json()
        message = decoded.get("message", "") if isinstance(decoded, dict) else ""
        return self.body.decode("utf-8", "replace") + "\n" + str(message)


class _Collect(Protocol):
    """What the server says until it closes the connection, or until its answer's Content-Length is in (a
    server draining a refused body keeps the connection open)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.done: Deferred[bytes] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        head, found, body = bytes(self.data).partition(b"\r\n\r\n")
        length = [line.partition(b":")[2] for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")]
        if found and length and len(body) >= int(length[0]):
            self.transport.loseConnection()

    def connectionLost(self, reason: Any = None) -> None:
        self.done.callback(bytes(self.data))


@defer.inlineCallbacks
def request(port: int, method: str, path: str, body: bytes = b"",
            headers: tuple[tuple[str, str], ...] = ()) -> Any:
    """Send one request as written (Host, Content-Length and Connection: close unless ``headers`` give them)."""
    given = {name.lower() for name, _ in headers}
    lines = [f"{method} {path} HTTP/1.1"]
    lines += [f"Host: 127.0.0.1:{port}"] if "host" not in given else []
    lines += [f"Content-Length: {len(body)}"] if "content-length" not in given else []
    lines += [f"{name}: {value}" for name, value in headers] + ["Connection: close", "", ""]
    protocol = yield connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), _Collect())
    protocol.transport.write("\r\n".join(lines).encode("latin-1") + body)
    raw = yield protocol.done
    return parse(raw)


def parse(raw: bytes) -> Answer:
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *fields = head.decode("latin-1").split("\r\n")
    assert status.startswith("HTTP/1.1 "), f"no answer: {raw[:200]!r}"
    headers: dict[str, list[str]] = {}
    for line in fields:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    if headers.get("transfer-encoding") == ["chunked"]:
        body = dechunk(body)
    return Answer(int(status.split()[1]), headers, body)


def dechunk(body: bytes) -> bytes:
    out = bytearray()
    while body:
        size, _, body = body.partition(b"\r\n")
        length = int(size.split(b";")[0], 16)
        if not length:
            break
        out += body[:length]
        body = body[length + 2:]
    return bytes(out)


def form(pairs: list[tuple[str, str]]) -> bytes:
    return urlencode(pairs).encode("ascii")


def fill(value: Any, names: dict[str, str]) -> Any:
    """``value`` with {site} and {feeds} replaced in every string in it."""
    if isinstance(value, str):
        for token, text in names.items():
            value = value.replace(token, text)
        return value
    if isinstance(value, bytes):
        return fill(value.decode("latin-1"), names).encode("latin-1")
    if isinstance(value, (list, tuple)):
        return type(value)(fill(v, names) for v in value)
    if isinstance(value, dict):
        return {k: fill(v, names) for k, v in value.items()}
    return value


def encode(row: Row, names: dict[str, str]) -> tuple[bytes, tuple[tuple[str, str], ...]]:
    """The row's body as bytes, and its headers (with the body's content type unless the row gives one)."""
    body = fill(row.body() if callable(row.body) else row.body, names)
    headers = tuple((name, fill(value, names)) for name, value in row.headers)
    if body is None:
        return b"", headers
    if not isinstance(body, bytes):
        body = form(body) if row.api == "worker" else json.dumps(body).encode("utf-8")
    if not any(name.lower() == "content-type" for name, _ in headers):
        kind = "application/x-www-form-urlencoded" if row.api == "worker" else "application/json"
        headers += (("Content-Type", kind),)
    return body, headers


# -- the table -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", [pytest.param(row, id=row.name) for row in ROWS])
def test_hostile_input(running: Node, row: Row) -> None:
    """The row's request gets its answer, the node logs no failure and leaks no secret, and /api/status answers."""
    del running.failures[:], running.lines[:]
    body, headers = encode(row, running.names)
    answer = spin(request(running.ports[row.api], row.method, fill(row.path, running.names), body, headers))
    text = answer.text()
    assert answer.code == row.code, (answer.code, answer.body[:500])
    assert fill(row.says, running.names) in text, answer.body[:500]
    decoded = answer.json()
    for key, value in row.fields.items():
        assert isinstance(decoded, dict) and decoded.get(key) == value, (key, answer.body[:500])
    assert "access-control-allow-origin" not in answer.headers, answer.headers
    assert "Traceback" not in text and answer.code != 500, answer.body[:500]
    status = spin(request(running.ports["node"], "GET", "/api/status"))
    assert status.code == 200 and status.json()["status"] == "ok", status.body[:500]
    assert running.failures == [], running.failures[0][:2000]
    if row.never:
        assert row.never not in answer.body.decode("utf-8", "replace") + text
        leaked = [line for line in running.lines if row.never in line]
        assert leaked == [], leaked[0][:500]

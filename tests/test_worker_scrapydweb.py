"""The tools users point at workers, against a real worker on 127.0.0.1: ScrapydWeb's Logs page (its own regular
expressions on the /logs/ listings), its Stats page (LogParser on a job's log, Range requests), a schedule.json that
sends no URLs (ScrapydWeb's Run button, python-scrapyd-api), and scrapyd-client with a target URL ending in "/".

LogParser is run for real where it is installed (``pip install '.[test]'``); those tests skip otherwise.  ScrapydWeb
itself pins old releases of Flask, Werkzeug, w3lib and idna, so it is not installed: its patterns are below.
"""

from __future__ import annotations

import configparser
import functools
import json
import os
import re
from collections import Counter
from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.internet.threads import deferToThread
from twisted.trial import unittest

from spiderd.worker import joblog
from spiderd.worker.logstats import LogStats
from tests.test_worker import WorkerTestBase
from tests.test_worker_scrapyd import EXAMPLE, _scrapyd_api

# ScrapydWeb 1.6.0 (scrapydweb/vars.py): the rows of Scrapyd's directory listing, and a row's link, as its Logs page
# reads them; a file's link is joined to the listing's URL as "url + href" (scrapydweb/views/files/logs.py).
DIRECTORY_PATTERN = re.compile(r"""
                                    <tr\sclass="(?P<odd_even>odd|even)">\n
                                        \s+<td>(?P<filename>.*?)</td>\n
                                        \s+<td>(?P<size>.*?)</td>\n
                                        (?:\s+<td>(?P<last_modified>.*?)</td>\n)?
                                        \s+<td>(?P<content_type>.*?)</td>\n
                                        \s+<td>(?P<content_encoding>.*?)</td>\n
                                    </tr>
                                """, re.X)
HREF_NAME_PATTERN = re.compile(r'href="(.+?)">(.+?)<')
# ScrapydWeb 1.6.0 (scrapydweb/views/dashboard/jobs.py): a job's row of Scrapyd's /jobs page, once <thead> is cut out
JOB_PATTERN = re.compile(r"""
                            <tr>\s*
                                <td>(?P<Project>.*?)</td>\s*
                                <td>(?P<Spider>.*?)</td>\s*
                                <td>(?P<Job>.*?)</td>\s*
                                (?:<td>(?P<PID>.*?)</td>\s*)?
                                (?:<td>(?P<Start>.*?)</td>\s*)?
                                (?:<td>(?P<Runtime>.*?)</td>\s*)?
                                (?:<td>(?P<Finish>.*?)</td>\s*)?
                                (?:<td>(?P<Log>.*?)</td>\s*)?
                                (?:<td>(?P<Items>.*?)</td>\s*)?
                                [\w\W]*?
                            </tr>
                          """, re.X)


def _logparser() -> Any:
    try:
        import logparser
    except ImportError:
        raise unittest.SkipTest("logparser is not installed (pip install '.[test]')") from None
    return logparser


def rows(listing: str) -> list[dict[str, str]]:
    """The rows ScrapydWeb's Logs page shows of a listing: each with its href and name, as it takes them."""
    found = []
    for match in DIRECTORY_PATTERN.finditer(listing):
        row = match.groupdict()
        row["href"], row["filename"] = HREF_NAME_PATTERN.search(row["filename"]).groups()
        found.append(row)
    return found


class ScrapydWebTests(WorkerTestBase):
    """What ScrapydWeb's Logs and Stats pages read: Scrapyd's listings, Scrapy's stats lines, ranges of a log."""

    @defer.inlineCallbacks
    def text(self, path: str, **kwargs: Any) -> Any:
        code, body, response = yield self.call("GET", path, **kwargs)
        return code, body.decode() if isinstance(body, bytes) else json.dumps(body), response

    @defer.inlineCallbacks
    def test_logs_listings_as_scrapydweb_reads_them(self) -> Any:
        """Each /logs/ level is "Directory listing for /logs/..." with rows ScrapydWeb's pattern reads, and a log's
        link, joined to the listing's URL as ScrapydWeb joins it, answers the log; /logs redirects to /logs/."""
        self.gate.open()
        service = self.worker()
        for jobid, start in (("job-a", 0), ("job-b", 2)):
            yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", jobid),
                                ("setting", self.urls(*self.good(start, 2))))
            yield service.runner.when_done(jobid)
        expected = {"/logs/": ("spiderd/", "[Directory]"), "/logs/spiderd/": ("demo-shop/", "[Directory]")}
        for path, (name, kind) in expected.items():
            code, listing, _ = yield self.text(path)
            self.assertIn(f"Directory listing for {path}", listing)
            [row] = rows(listing)
            self.assertEqual((code, row["href"], row["filename"], row["content_type"], row["odd_even"]),
                             (200, name, name, kind, "odd"))
            self.assertRegex(row["last_modified"], r"^\d{4}-\d\d-\d\d \d\d:\d\d$")
        url = self.api + "/logs/spiderd/demo-shop/"
        code, listing, _ = yield self.text("/logs/spiderd/demo-shop/")
        found = rows(listing)
        self.assertEqual([(r["filename"], r["href"], r["odd_even"], r["content_type"]) for r in found],
                         [("job-a.log", "job-a.log", "odd", "[text/plain]"),
                          ("job-b.log", "job-b.log", "even", "[text/plain]")])
        for row in found:
            response = yield self.http.get(url + row["href"])  # ScrapydWeb's link to the log
            body = yield response.content()
            self.assertEqual(response.code, 200)
            self.assertIn(f"Worker: job {row['filename'][:-4]} finished".encode(), body)
            self.assertEqual(row["size"], f"{len(body) // 1024}K" if len(body) >= 1024 else f"{len(body)}B")
        _, page, _ = yield self.text("/jobs")
        self.assertIn("<h1>Jobs</h1>", page)
        jobs = [m.groupdict() for m in JOB_PATTERN.finditer(re.sub(r"<thead>.*?</thead>", "", page, flags=re.S))]
        self.assertEqual([(j["Project"], j["Spider"], j["Job"], j["Log"]) for j in jobs],
                         [("spiderd", "demo-shop", job, f'<a href="/logs/spiderd/demo-shop/{job}.log">Log</a>')
                          for job in ("job-b", "job-a")])
        self.assertRegex(jobs[0]["Finish"], r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")  # a finished job, to ScrapydWeb
        for path, location in (("/logs", "logs/"), ("/logs/spiderd", "spiderd/"), ("/logs/spiderd/demo-shop",
                                                                                  "demo-shop/")):
            response = yield self.http.get(self.api + path, allow_redirects=False)
            self.assertEqual((response.code, response.headers.getRawHeaders("location")), (302, [location]), path)

    @defer.inlineCallbacks
    def test_job_log_as_logparser_reads_it(self) -> Any:
        """LogParser (which ScrapydWeb's Stats page runs on a job's log) finds the job's pages, items and end in
        Scrapy's lines: the "Crawled ..." line from its start, the "Dumping Scrapy stats" block at its end."""
        logparser = _logparser()
        self.gate.open()
        service = self.worker()
        missing = sorted(self.spec.expected().not_found)[0]
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "parsed"),
                                    ("setting", self.urls(*self.good(0, 3), missing)))
        yield service.runner.when_done(jobid)
        _, text, _ = yield self.text("/logs/spiderd/demo-shop/parsed.log")
        parsed = logparser.parse(text)
        self.assertEqual((parsed["pages"], parsed["items"], parsed["finish_reason"]), (4, 3, "finished"))
        self.assertEqual([data[1:] for data in parsed["datas"]], [[0, 0, 0, 0]])  # the line at the job's start
        stats = parsed["crawler_stats"]
        self.assertEqual((stats["item_scraped_count"], stats["response_received_count"], stats["spiderd/failed"],
                          stats["downloader/response_status_count/404"]), (3, 4, 1, 1))
        self.assertEqual(parsed["log_categories"]["warning_logs"]["count"], 1)  # the 404, a WARNING line
        self.assertNotIn("json_loads_error", stats)

    @defer.inlineCallbacks
    def test_range_requests(self) -> Any:
        """A log answers a byte range with 206 and its part (Content-Range), one past its end with 416; a header
        that is not one byte range gets the whole log (200); every answer says Accept-Ranges: bytes."""
        self.gate.open()
        service = self.worker()
        yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "ranged"),
                            ("setting", self.urls(*self.good(0, 2))))
        yield service.runner.when_done("ranged")
        path = self.api + "/logs/spiderd/demo-shop/ranged.log"
        response = yield self.http.get(path)
        whole = yield response.content()
        size = len(whole)
        self.assertEqual((response.code, response.headers.getRawHeaders("accept-ranges")), (200, ["bytes"]))
        cases = [("bytes=0-99", 206, f"bytes 0-99/{size}", whole[:100]),
                 ("bytes=100-", 206, f"bytes 100-{size - 1}/{size}", whole[100:]),
                 ("bytes=-50", 206, f"bytes {size - 50}-{size - 1}/{size}", whole[-50:]),
                 (f"bytes=10-{size + 500}", 206, f"bytes 10-{size - 1}/{size}", whole[10:]),
                 (f"bytes={size}-", 416, f"bytes */{size}", b""),
                 ("bytes=0-1,5-6", 200, None, whole), ("lines=0-5", 200, None, whole), ("bytes=9-2", 200, None, whole)]
        for header, code, content_range, part in cases:
            response = yield self.http.get(path, headers={"Range": header})
            body = yield response.content()
            self.assertEqual((response.code, response.headers.getRawHeaders("content-range", [None])[0], body),
                             (code, content_range, part), header)
            self.assertEqual(response.headers.getRawHeaders("accept-ranges"), ["bytes"])


class StatsLineTests(unittest.SynchronousTestCase):
    """A running job's "Crawled ..." line every minute on the worker's clock, as Scrapy's LogStats writes it."""

    def test_a_line_a_minute_as_logparser_reads_them(self) -> None:
        """The lines at the start and after each minute give LogParser the job's pages and items and their rate per
        minute; they stop with the lines about single URLs, so the job's end always fits in its log."""
        logparser = _logparser()
        clock = Clock()
        clock.advance(1_800_000_000)
        directory = self.mktemp()
        logs = joblog.JobLogs(directory, lambda f, *a: defer.maybeDeferred(f, *a), clock)
        logs.open([])
        logs.line("j", "Worker: job j (demo-shop) started: 9 URLs")
        stats: Counter[str] = Counter()
        ticker = LogStats(clock, functools.partial(logs.progress, "j"), lambda: stats)
        ticker.start()
        stats.update(status_200=5, status_404=1, status_timeout=1, requests=7, items=4)
        clock.advance(60)
        stats.update(status_200=2, requests=2, items=2)
        clock.advance(60)
        ticker.stop()
        logs.flush()
        with open(os.path.join(directory, "j.log"), encoding="utf-8") as f:
            parsed = logparser.parse(f.read())
        self.assertEqual([data[1:] for data in parsed["datas"]], [[0, 0, 0, 0], [6, 6, 4, 4], [8, 2, 6, 2]])
        self.assertTrue(parsed["latest_matches"]["latest_stat"].endswith(
            "INFO: Crawled 8 pages (at 2 pages/min), scraped 6 items (at 2 items/min)"))
        self.assertEqual(clock.getDelayedCalls(), [])
        self.patch(joblog, "URL_LINES_BYTES", logs.size("j"))
        logs.progress("j", "Crawled 9 pages (at 1 pages/min), scraped 6 items (at 0 items/min)")
        self.assertEqual((logs.size("j"), logs.take_dropped("j")), (joblog.URL_LINES_BYTES, 0))


class NoURLsTests(WorkerTestBase):
    """schedule.json without DISTRIBUTED_START_URLS, as ScrapydWeb's Run button, Gerapy and plain clients send it."""

    @defer.inlineCallbacks
    def test_refused_unless_the_spider_has_start_urls(self) -> Any:
        """Refused in Scrapyd's error shape with a message saying how to send URLs (as the home page's example
        sends them), and nothing is persisted; a spider with start_urls of its own in [[sites]] runs them."""
        self.gate.open()
        service = self.worker()
        message = ("DISTRIBUTED_START_URLS is required: a spiderd job fetches the URLs it is sent, as a JSON list in "
                   "one setting, for example -d setting='DISTRIBUTED_START_URLS=[\"https://example.com/item/1.html\"]' "
                   "(spider 'demo-shop' has no start_urls of its own in [[sites]])")
        code, answer, _ = yield self.call("POST", "/schedule.json", {"project": "spiderd", "spider": "demo-shop"})
        self.assertEqual((code, answer), (200, {"status": "error", "message": message, "node_name": "test-node"}))
        self.assertEqual(self.job_files(), {})
        _, home, _ = yield self.call("GET", "/")  # the home page's curl example sends URLs
        self.assertIn(b"-d spider=SPIDER -d setting=&#x27;DISTRIBUTED_START_URLS=[&quot;URL&quot;, ...]&#x27;", home)
        scrapyd_api = _scrapyd_api()
        api = scrapyd_api.ScrapydAPI(self.api)

        def schedule() -> str:
            try:
                return str(api.schedule("spiderd", "demo-shop"))
            except scrapyd_api.exceptions.ScrapydResponseError as e:
                return str(e)

        said = yield deferToThread(schedule)
        self.assertEqual(said, message)
        yield service.stopService()
        start = self.good(0, 1)[0]
        service = self.worker("seeded", {"start_urls": [self.root + start]})
        code, answer, _ = yield self.call("POST", "/schedule.json", [("project", "spiderd"), ("spider", "seeded"),
                                                                    ("setting", self.feed_setting()), ("batch", "b1")])
        self.assertEqual((code, answer["status"]), (200, "ok"), answer)
        yield service.runner.when_done(answer["jobid"])
        yield self.shipper.settled()
        [item] = self.feed_items("b1", "seeded")
        self.assertEqual(item["url"], self.root + start)


class DoubledSlashTests(WorkerTestBase):
    """A client URL that ends in "/" (the example's scrapy.cfg, as Scrapyd's docs write it) gives "//" paths."""

    @defer.inlineCallbacks
    def test_a_doubled_slash_is_the_single_slash_path(self) -> Any:
        """//listprojects.json and //schedule.json answer as their single-slash forms, and scrapyd-client's
        client works with a target URL ending in "/"; the example project's URL has no "/" at the end."""
        self.worker()
        code, answer, _ = yield self.call("GET", "//listprojects.json")
        self.assertEqual((code, answer["projects"]), (200, ["spiderd"]))
        code, answer, _ = yield self.call("POST", "//schedule.json", [("project", "spiderd"), ("spider", "demo-shop"),
                                                                     ("setting", self.urls())])
        self.assertEqual((code, answer["status"]), (200, "ok"))
        try:
            from scrapyd_client.pyclient import ScrapydClient
        except ImportError:
            raise unittest.SkipTest("scrapyd-client is not installed (pip install '.[test]')") from None
        projects = yield deferToThread(lambda: ScrapydClient(self.api + "/").projects())
        self.assertEqual(projects, ["spiderd"])
        config = configparser.ConfigParser()
        config.read(os.path.join(EXAMPLE, "scrapy.cfg"))
        self.assertFalse(config["deploy"]["url"].endswith("/"), config["deploy"]["url"])

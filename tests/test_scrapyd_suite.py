"""Scrapyd 1.6.0's own integration suite against a real worker on 127.0.0.1, configured as the suite expects.

The checks of ``integration_tests/`` in scrapy/scrapyd (tag 1.6.0; BSD-3-Clause, copyright Scrapy developers),
written here one for one with treq instead of requests, so they run in this suite on a free port: its 31 tests, with
its credentials (``hello12345`` / ``67890world``) and its ``req()`` helper (no credentials and wrong ones must get
401 with the body ``Unauthorized``).  One check differs on purpose, and says so: ``listprojects.json`` names the
worker's one project, where a Scrapyd with no egg deployed names none (docs/reference/scrapyd.md).
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

from twisted.internet import defer

from tests.test_worker import WorkerTestBase

USER, PASSWORD = "hello12345", "67890world"
OPTIONS = [("GET", "daemonstatus"), ("POST", "addversion"), ("POST", "schedule"), ("POST", "cancel"),
           ("GET", "status"), ("GET", "listprojects"), ("GET", "listversions"), ("GET", "listspiders"),
           ("GET", "listjobs"), ("POST", "delversion"), ("POST", "delproject")]


def egg() -> bytes:
    """A small ZIP file, as the suite's egg fixture is (the worker takes no eggs: what it holds is never read)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("EGG-INFO/PKG-INFO", "Name: mybot\n")
    return buffer.getvalue()


class ScrapydSuiteTests(WorkerTestBase):
    """integration_tests/test_webservice.py and test_website.py of Scrapyd 1.6.0, check for check."""

    def setUp(self) -> None:
        super().setUp()
        self.gate.open()
        self.worker(username=USER, password=PASSWORD)

    @defer.inlineCallbacks
    def req(self, method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        """The suite's ``req()``: 401 and exactly ``Unauthorized`` without credentials and with wrong ones, then the
        answer to the right ones, with ``status``; fires with (response, body)."""
        for bad in (None, ("baduser", "badpass")):
            response = yield self.http.request(method, self.api + path, auth=bad, **kwargs)
            body = yield response.content()
            self.assertEqual((response.code, body), (401, b"Unauthorized"), f"{method} {path} with {bad}")
        response = yield self.http.request(method, self.api + path, auth=(USER, PASSWORD), **kwargs)
        body = yield response.content()
        self.assertEqual(response.code, status, f"{method} {path}: {body[:300]!r}")
        return response, body

    @defer.inlineCallbacks
    def assert_response(self, method: str, path: str, expected: dict[str, Any], **kwargs: Any) -> Any:
        """The suite's ``assert_response()``: the JSON answer less ``node_name``, ending with a line break."""
        _, body = yield self.req(method, path, **kwargs)
        data = json.loads(body)
        data.pop("node_name")
        self.assertEqual(data, expected, path)
        self.assertTrue(body.endswith(b"\n"))

    # -- test_webservice.py ---------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def test_options(self) -> Any:
        """OPTIONS on each endpoint: 204, no body, and Allow names its method after OPTIONS and HEAD."""
        for method, basename in OPTIONS:
            response = yield self.http.request("OPTIONS", f"{self.api}/{basename}.json", auth=(USER, PASSWORD))
            body = yield response.content()
            self.assertEqual((response.code, response.headers.getRawHeaders("allow"), body),
                             (204, [f"OPTIONS, HEAD, {method}"], b""), basename)

    @defer.inlineCallbacks
    def test_project_directory_traversal(self) -> Any:
        """A project name that is a path gets Scrapyd's DirectoryTraversalError from the endpoints whose egg storage
        checks it (addversion with an egg, listversions, delversion, delproject)."""
        cases = [("POST", "addversion", {"version": "v", "egg": egg()}), ("GET", "listversions", {}),
                 ("POST", "delversion", {"version": "v"}), ("POST", "delproject", {})]
        for method, basename, params in cases:
            where = {"params" if method == "GET" else "data": {"project": "../p", **params}}
            response = yield self.http.request(method, f"{self.api}/{basename}.json", auth=(USER, PASSWORD), **where)
            data = json.loads((yield response.content()))
            data.pop("node_name")
            self.assertEqual((response.code, data),
                             (200, {"status": "error", "message": "DirectoryTraversalError: ../p"}), basename)

    @defer.inlineCallbacks
    def test_daemonstatus(self) -> Any:
        """daemonstatus.json of a new worker: nothing pending, running or finished."""
        yield self.assert_response("GET", "/daemonstatus.json",
                                   {"status": "ok", "running": 0, "pending": 0, "finished": 0})

    @defer.inlineCallbacks
    def test_errors_for_a_nonexistent_project(self) -> Any:
        """schedule, status, cancel, listspiders, listjobs and delproject name the project that is not found."""
        missing = {"status": "error", "message": "project 'nonexistent' not found"}
        yield self.assert_response("POST", "/schedule.json", missing,
                                   data={"project": "nonexistent", "spider": "nospider"})
        yield self.assert_response("GET", "/status.json", missing, params={"job": "sample", "project": "nonexistent"})
        yield self.assert_response("POST", "/cancel.json", missing, data={"project": "nonexistent", "job": "nojob"})
        yield self.assert_response("GET", "/listspiders.json", missing, params={"project": "nonexistent"})
        yield self.assert_response("GET", "/listjobs.json", missing, params={"project": "nonexistent"})
        yield self.assert_response("POST", "/delproject.json", missing, data={"project": "nonexistent"})

    @defer.inlineCallbacks
    def test_status_nonexistent_job(self) -> Any:
        """status.json of a job that does not exist: currstate null."""
        yield self.assert_response("GET", "/status.json", {"status": "ok", "currstate": None}, params={"job": "sample"})

    @defer.inlineCallbacks
    def test_listprojects(self) -> Any:
        """listprojects.json: the suite expects [] (no egg deployed); a worker names its one project, on purpose."""
        yield self.assert_response("GET", "/listprojects.json", {"status": "ok", "projects": ["spiderd"]})

    @defer.inlineCallbacks
    def test_listversions(self) -> Any:
        """listversions.json of a project the worker does not have: no versions."""
        yield self.assert_response("GET", "/listversions.json", {"status": "ok", "versions": []},
                                   params={"project": "sample"})

    @defer.inlineCallbacks
    def test_listjobs(self) -> Any:
        """listjobs.json of a new worker: three empty lists."""
        yield self.assert_response("GET", "/listjobs.json", {"status": "ok", "pending": [], "running": [],
                                                             "finished": []})

    @defer.inlineCallbacks
    def test_delversion_nonexistent_project(self) -> Any:
        """delversion.json of a version that is not there: Scrapyd's "not found"."""
        yield self.assert_response("POST", "/delversion.json",
                                   {"status": "error", "message": "version 'nonexistent' not found"},
                                   data={"project": "sample", "version": "nonexistent"})

    # -- test_website.py ------------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def test_root(self) -> Any:
        """/ links to /jobs and /logs/."""
        _, body = yield self.req("GET", "/")
        self.assertIn(b'"/jobs"', body)
        self.assertIn(b'"/logs/"', body)

    @defer.inlineCallbacks
    def test_paths(self) -> Any:
        """/jobs says "Cancel" (here: why it has no button) and /logs, redirected to /logs/, has "Last modified"."""
        for path, content in (("jobs", b"Cancel"), ("logs", b"Last modified")):
            _, body = yield self.req("GET", f"/{path}")
            self.assertIn(content, body, path)

    @defer.inlineCallbacks
    def test_base_path(self) -> Any:
        """Behind a proxy that sends X-Forwarded-Prefix, / links under that prefix."""
        _, body = yield self.req("GET", "/", headers={"X-Forwarded-Prefix": "/path/to"})
        self.assertIn(b'"/path/to/jobs"', body)
        self.assertIn(b'"/path/to/logs/"', body)

"""The worker's web pages, as Scrapyd 1.6's ``website.py`` has them: ``/``, ``/jobs`` and each job's log under ``/logs/``.

Plain HTML with no script and no external resource (a Content-Security-Policy
says so to the browser), every value escaped: job ids, spider names,
settings and host names come from clients.  A job's log is served as
``text/plain`` at Scrapyd's path, ``/logs/<project>/<spider>/<job id>.log``
(a byte range of it with 206, as Scrapyd's ``static.File``), and ``/logs/``
and the directories below it are Scrapyd's listings (see :mod:`.listing`).
Links are under the ``X-Forwarded-Prefix`` a reverse proxy sends, as in
Scrapyd.  The jobs page has no Cancel button: a cancelled spiderd job ships
nothing, so its batch is lost to the frontier (``cancel.json`` is there for
who means it); the page says so where Scrapyd's has its Cancel column.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta
from html import escape
from typing import TYPE_CHECKING, Callable, Iterator
from urllib.parse import quote, unquote_to_bytes

from twisted.internet.defer import Deferred
from twisted.web import http
from twisted.web.server import NOT_DONE_YET, Request

import spiderd

from spiderd.core.net.ranges import byte_range
from spiderd.worker.jobs import ENDED, RUNNING, Job
from spiderd.worker.listing import listing

if TYPE_CHECKING:
    from spiderd.worker.runner import JobRunner

Error = Callable[[Request, str, int], bytes]

HEADERS = {
    b"Content-Security-Policy": b"default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; "
                                b"base-uri 'none'; form-action 'none'",
    b"X-Content-Type-Options": b"nosniff",
    b"Referrer-Policy": b"no-referrer",
    b"Cache-Control": b"no-store",
}
STYLE = """body { font-family: system-ui, sans-serif; }
table { border-collapse: collapse; }
th, td { border-style: solid; border-width: 1px; padding: .5rem; }
tbody > tr:first-child { background-color: #eee; }
td:nth-child(2), td:nth-child(3) { word-break: break-all; }"""
COLUMNS = ("Project", "Spider", "Job", "PID", "Start", "Runtime", "Finish", "Log")
PREFIX = re.compile(r"(/[A-Za-z0-9._~%+-]+)+")  # an X-Forwarded-Prefix taken: a plain path


def base_path(request: Request) -> str:
    """The path a reverse proxy serves the worker under (``X-Forwarded-Prefix``, as Scrapyd's ``prefix_header``),
    for the pages' links; "" when there is none, or when it is not a plain path."""
    prefix = (request.getHeader(b"x-forwarded-prefix") or b"").decode("latin-1").rstrip("/")
    return prefix if PREFIX.fullmatch(prefix) else ""


def log_path(job: Job) -> str:
    """Scrapyd's URL path of a job's log."""
    return f"/logs/{quote(job.project, safe='')}/{quote(job.spider, safe='')}/{quote(job.id, safe='')}.log"


class Pages:
    """Renders the pages from the runner's jobs (``runner.logs`` has their logs)."""

    def __init__(self, runner: JobRunner, project: str, spiders: list[str]) -> None:
        self._runner = runner
        self._project = project
        self._spiders = spiders

    @staticmethod
    def handles(path: bytes) -> bool:
        return path in (b"/", b"/jobs", b"/jobs/", b"/logs") or path.startswith(b"/logs/")

    def render(self, request: Request, error: Error) -> bytes | int:
        """GET or HEAD of a page or a log; anything else is refused as the JSON endpoints refuse it."""
        if request.method == b"OPTIONS":
            request.setHeader(b"Allow", b"OPTIONS, HEAD, GET")
            request.setResponseCode(http.NO_CONTENT)
            return b""
        if request.method not in (b"GET", b"HEAD"):
            request.setHeader(b"Allow", b"OPTIONS, HEAD, GET")
            return error(request, "UnsupportedMethod: Expected one of [b'HEAD', b'OPTIONS', b'GET']",
                         http.NOT_ALLOWED)
        path = request.path
        if path == b"/":
            return _send(request, self.home(request), b"text/html; charset=utf-8")
        if path in (b"/jobs", b"/jobs/"):
            return _send(request, self.jobs(request), b"text/html; charset=utf-8")
        parts = [unquote_to_bytes(p).decode("utf-8", "replace") for p in path[len(b"/logs"):].split(b"/") if p]
        if len(parts) == 3 and parts[2].endswith(".log"):
            return self._log(request, parts, error)
        found = listing(self._logged(), parts) if len(parts) < 3 else None
        if found is None:
            return error(request, f"No such resource: {path.decode('latin-1')}", http.NOT_FOUND)
        if not path.endswith(b"/"):  # as Twisted's static.File: a directory's links are relative to "<dir>/"
            return _redirect(request, path.rsplit(b"/", 1)[1] + b"/")
        return _send(request, _page(*found), b"text/html; charset=utf-8")

    # -- pages ------------------------------------------------------------------------------------------------

    def home(self, request: Request) -> str:
        base = escape(base_path(request))
        host = (request.getHeader(b"host") or b"127.0.0.1:6800").decode("latin-1")
        spiders = "\n".join(f"    <li>{escape(name)}</li>" for name in self._spiders) or "    <li>(none)</li>"
        example = (f"curl http://{host}/schedule.json -d project={self._project} -d spider=SPIDER "
                   """-d setting='DISTRIBUTED_START_URLS=["URL", ...]'""")
        return _page("spiderd worker", f"""<h1>spiderd worker</h1>
<ul>
    <li><a href="{base}/jobs">Jobs</a></li>
    <li><a href="{base}/logs/">Logs</a></li>
</ul>
<p>Project {escape(self._project)} (spiderd {escape(spiderd.__version__)}), its spiders (the
configuration's <code>[[sites]]</code>):</p>
<ul>
{spiders}
</ul>
<p>This web UI is for monitoring only. To schedule crawls, use the Scrapyd API. For example, using curl:</p>
<p><code>{escape(example)}</code></p>""")

    def jobs(self, request: Request) -> str:
        base = base_path(request)
        now = self._runner.now()
        jobs = self._runner.jobs.values()
        running = sorted((j for j in jobs if j.state == RUNNING), key=lambda j: j.start_time or 0.0)
        finished = sorted((j for j in jobs if j.state in ENDED and j.start_time is not None),
                          key=lambda j: j.end_time or 0.0, reverse=True)
        head = "\n".join(f"<th>{c}</th>" for c in COLUMNS)
        groups = [("Pending", [self._row(j, now, base) for j in self._runner.pending()]),
                  ("Running", [self._row(j, now, base) for j in running]),
                  ("Finished", [self._row(j, now, base) for j in finished])]
        bodies = "\n".join(f'<tbody>\n<tr><th colspan="{len(COLUMNS)}">{name}</th></tr>\n' + "\n".join(rows)
                           + "\n</tbody>" for name, rows in groups)
        return _page("spiderd worker: jobs", f"""<h1>Jobs</h1>
<p><a href="{escape(base)}/">Go up</a></p>
<p>Cancel: no button here, unlike Scrapyd's page: a cancelled job ships no feed, so its batch would be lost to the
frontier. To cancel a job all the same, POST <code>cancel.json</code> with its project and job.</p>
<table id="jobs">
<thead><tr>
{head}
</tr></thead>
{bodies}
</table>""")

    def _row(self, job: Job, now: float, base: str) -> str:
        start, end = job.start_time, job.end_time if job.state in ENDED else None
        cells = {
            "Project": escape(job.project), "Spider": escape(job.spider), "Job": escape(job.id),
            "PID": str(os.getpid()) if job.state == RUNNING else "",
            "Start": _when(start), "Finish": _when(end),
            "Runtime": _span((end or now) - start) if start is not None else "",
            "Log": f'<a href="{escape(base + log_path(job))}">Log</a>' if self._runner.logs.has(job.id) else "",
        }
        return "<tr>" + "".join(f"<td>{cells[c]}</td>" for c in COLUMNS) + "</tr>"

    def _logged(self) -> Iterator[tuple[Job, int]]:
        """The jobs that have logs, each with its log's size."""
        logs = self._runner.logs
        return ((job, logs.size(job.id)) for job in self._runner.jobs.values() if logs.has(job.id))

    def _log(self, request: Request, parts: list[str], error: Error) -> bytes | int:
        project, spider, name = parts
        job = self._runner.jobs.get(name[: -len(".log")])
        if job is None or (job.project, job.spider) != (project, spider) or not self._runner.logs.has(job.id):
            return error(request, f"No such resource: {request.path.decode('latin-1')}", http.NOT_FOUND)
        d: Deferred[bytes] = self._runner.logs.read(job.id)
        gone: list[bool] = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))
        d.addCallback(lambda body: None if gone else _finish(request, _send_part(request, body)))
        d.addErrback(lambda f: None if gone else _finish(request, error(request, "reading the log failed",
                                                                       http.INTERNAL_SERVER_ERROR)))
        return NOT_DONE_YET


def _page(title: str, body: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>
{STYLE}
</style>
</head>
<body>
{body}
</body>
</html>
"""


def _send(request: Request, content: str | bytes, content_type: bytes) -> bytes:
    body = content.encode("utf-8") if isinstance(content, str) else content
    request.setHeader(b"Content-Type", content_type)
    for name, value in HEADERS.items():
        request.setHeader(name, value)
    request.setHeader(b"Content-Length", str(len(body)).encode())
    return b"" if request.method == b"HEAD" else body


def _finish(request: Request, body: bytes) -> None:
    request.write(body)
    request.finish()


def _when(timestamp: float | None) -> str:
    """A local time without microseconds, as Scrapyd's pages show it."""
    return "" if timestamp is None else str(datetime.fromtimestamp(timestamp).replace(microsecond=0))


def _span(seconds: float) -> str:
    return str(timedelta(seconds=int(max(seconds, 0.0))))


def _redirect(request: Request, location: bytes) -> bytes:
    """302 to ``location`` (relative to the request's path, so a proxy's prefix stays), as Twisted's redirectTo."""
    request.setResponseCode(http.FOUND)
    request.setHeader(b"Location", location)
    return _send(request, b"", b"text/plain; charset=utf-8")


def _send_part(request: Request, body: bytes) -> bytes:
    """A log, or the part of it a ``Range`` header asks for (206; 416 past its end), as Scrapyd's static.File."""
    request.setHeader(b"Accept-Ranges", b"bytes")
    wanted = byte_range(request.getHeader(b"range"), len(body))
    if wanted is not None:
        request.setHeader(b"Content-Range", wanted.content_range())
        request.setResponseCode(http.PARTIAL_CONTENT if wanted.satisfiable else http.REQUESTED_RANGE_NOT_SATISFIABLE)
        body = body[wanted.first:wanted.last + 1]
    return _send(request, body, b"text/plain; charset=utf-8")

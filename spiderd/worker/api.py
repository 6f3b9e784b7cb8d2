"""Scrapyd 1.6's JSON API, answered by the worker.

Endpoints, parameters, fields and error messages follow Scrapyd 1.6's
``scrapyd/webservice.py``: errors in what the client sent are answered with
HTTP 200 and ``{"status": "error", "message": ...}``; every answer has
``node_name``.  Wrong or missing credentials get 401 with the body
``Unauthorized``, as from Scrapyd's ``HTTPAuthSessionWrapper``; a project name
that is a path (``../p``) gets Scrapyd's ``DirectoryTraversalError`` from the
endpoints whose egg storage checks it; a path with doubled slashes
(``//listprojects.json``, from a client URL that ends in ``/``) is answered as
its single-slash form.  Where Scrapyd has no answer of its own: a body over the
cap 413 (see :mod:`.http`), a stopping worker 503, an internal error 500.
Secrets never leave: URIs in settings and arguments are redacted in
``listjobs.json`` and in logs.
"""

from __future__ import annotations

import os
import re
import uuid
from datetime import datetime
from typing import Any, Callable, Iterable

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.server import NOT_DONE_YET, Request

from spiderd.core.lifecycle import settled
from spiderd.core.net.guard import foreign_request
from spiderd.core.secrets import redact_text, redact_value
from spiderd.core.storage import storage_error
from spiderd.core.net.auth import Auth
from spiderd.core.net.resource import JsonResource, send
from spiderd.core.net.serving import ApiError, json_body
from spiderd.worker.jobs import ENDED, FINISHED, PENDING, RUNNING, Job
from spiderd.worker.pages import Pages, log_path
from spiderd.worker.runner import JobExists, JobRunner, WorkerStopping
from spiderd.worker.validate import Validator

log = Logger()
MAX_NAMES = 20  # spiders named in a refusal
SLASHES = re.compile(rb"//+")
Handler = Callable[["Params"], "dict[str, Any] | Deferred[dict[str, Any]]"]


class Params:
    """A request's arguments (query string and form body), taken one by one as Scrapyd's ``param`` does."""

    def __init__(self, request: Request) -> None:
        self._args: dict[bytes, list[bytes]] = dict(request.args or {})

    def get(self, name: str, required: bool = True) -> str | None:
        """The first value of ``name``; a missing required one is an error."""
        values = self._args.pop(name.encode(), None)
        if values is None:
            if required:
                raise ApiError(f"'{name}' parameter is required")
            return None
        return _decode(name, values[0])

    def raw(self, name: str) -> bytes:
        """The first value of a required parameter as bytes (an egg), as Scrapyd's ``param(type=bytes)``."""
        values = self._args.pop(name.encode(), None)
        if values is None:
            raise ApiError(f"'{name}' parameter is required")
        return values[0]

    def all(self, name: str) -> list[str]:
        """Every value of a repeatable parameter."""
        return [_decode(name, value) for value in self._args.pop(name.encode(), [])]

    def rest(self) -> dict[str, str]:
        """The parameters not taken yet (spider arguments), first value of each."""
        rest = {}
        for key, values in self._args.items():
            name = _decode("parameter name", key)
            rest[name] = _decode(name, values[0])
        return rest


def _decode(name: str, value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(f"{name} is invalid: {e}") from None


class WorkerAPI(JsonResource):
    """Scrapyd's endpoints on the shared JSON resource base: basic auth, the browser guard, Scrapyd's errors."""

    label = "Worker API"
    refusal_code = http.OK  # Scrapyd answers a client's mistake with 200 and status error

    def __init__(self, runner: JobRunner, validator: Validator,
                 node_name: str, auth: Auth) -> None:
        super().__init__()
        self._runner = runner
        self._validator = validator
        self._node = node_name
        self._auth = auth
        self._pages = Pages(runner, validator.project, list(validator.spiders))
        self.ready: Deferred[None] = succeed(None)  # the worker's recovery at start (WorkerService sets it)
        self.routes = {
            b"/schedule.json": (b"POST", self.schedule),
            b"/cancel.json": (b"POST", self.cancel),
            b"/listjobs.json": (b"GET", self.listjobs),
            b"/status.json": (b"GET", self.status),
            b"/daemonstatus.json": (b"GET", self.daemonstatus),
            b"/listprojects.json": (b"GET", self.listprojects),
            b"/listversions.json": (b"GET", self.listversions),
            b"/listspiders.json": (b"GET", self.listspiders),
            b"/addversion.json": (b"POST", self.addversion),
            b"/delversion.json": (b"POST", self.delversion),
            b"/delproject.json": (b"POST", self.delproject),
        }

    # -- dispatch ---------------------------------------------------------------------------------------------

    def admit(self, request: Request) -> bytes | None:
        if not self._auth.allows(request):
            log.warn("Worker API: wrong or missing credentials from {peer}", peer=str(request.getClientAddress()))
            request.setHeader(b"WWW-Authenticate", b'Basic realm="spiderd"')
            return send(request, http.UNAUTHORIZED, b"text/plain; charset=utf-8", b"Unauthorized")
        refused = foreign_request(request, self._auth.required)
        if refused is not None:
            log.warn("Worker API: {why} ({method} {path} from {peer})", why=refused, method=request.method.decode(),
                     path=request.path.decode("latin-1")[:200], peer=str(request.getClientAddress()))
            return self.error(request, refused, http.FORBIDDEN)
        return None

    def render(self, request: Request) -> bytes | int:
        request.path = SLASHES.sub(b"/", request.path)  # "//listprojects.json" is "/listprojects.json"
        refused = self.admit(request)
        if refused is not None:
            return refused
        if not self.ready.called:  # the jobs on disk are being read: answer once they are
            gone: list[bool] = []
            request.notifyFinish().addErrback(lambda _: gone.append(True))
            settled([self.ready]).addCallback(lambda _: None if gone else self._answer_later(request))
            return NOT_DONE_YET
        if self._pages.handles(request.path):
            return self._pages.render(request, self.error)
        return super().render(request)

    def _answer_later(self, request: Request) -> None:
        body = self.render(request)
        if body != NOT_DONE_YET and isinstance(body, bytes):
            request.write(body)
            request.finish()

    def path_of(self, request: Request) -> bytes:
        return request.path.rstrip(b"/") if request.path != b"/" else request.path

    def not_found(self, request: Request, path: bytes) -> bytes:
        return self.error(request, f"No such resource: {request.path.decode('latin-1')}", http.NOT_FOUND)

    def wrong_method(self, request: Request, path: bytes, method: bytes) -> bytes | int:
        if request.method == b"OPTIONS":
            request.setHeader(b"Allow", b", ".join([b"OPTIONS", b"HEAD", method]))
            request.setResponseCode(http.NO_CONTENT)
            return b""
        expected = [b"HEAD", b"OPTIONS", method]
        return self.error(request, f"UnsupportedMethod: Expected one of {expected!r}", http.OK)

    def argument(self, request: Request) -> Params:
        return Params(request)

    def ok(self, request: Request, data: Any) -> bytes:
        return self._answer(request, {**data, "status": "ok"}, http.OK)

    def error(self, request: Request, message: str, code: int = http.OK) -> bytes:
        message = redact_text(message)
        return self._answer(request, {"status": "error", "message": message}, code)

    def _answer(self, request: Request, data: dict[str, Any], code: int) -> bytes:
        return send(request, code, b"application/json", json_body(data, self._node))

    # -- endpoints --------------------------------------------------------------------------------------------

    def schedule(self, p: Params) -> Deferred[dict[str, Any]]:
        """Accept a job: fires once it is persisted (the job runs later)."""
        project, spider = p.get("project"), p.get("spider")
        version, jobid, priority = p.get("_version", False), p.get("jobid", False), p.get("priority", False)
        settings = p.all("setting")
        assert project is not None and spider is not None
        self._validator.check_project(project)
        self._validator.check_version(version)
        self._validator.check_spider(spider, settings)
        jobid = uuid.uuid1().hex if jobid is None else jobid  # Scrapyd's default job id
        checked = self._validator.job(project, spider, version, jobid, priority, settings, p.rest())
        return checked.addCallback(self._submit)

    def _submit(self, checked: tuple[Job, list[str]]) -> Deferred[dict[str, Any]]:
        job, urls = checked
        d: Deferred[Any] = self._runner.submit(job, urls)
        d.addCallbacks(self._scheduled, _refused, errbackArgs=(job.id,))
        return d

    def _scheduled(self, job: Job) -> dict[str, Any]:
        return {"jobid": job.id}

    def cancel(self, p: Params) -> Deferred[dict[str, Any]]:
        """Cancel a pending or running job; answers its previous state."""
        project, job = p.get("project"), p.get("job")
        p.get("signal", False)  # Scrapyd signals its child process; a job here is stopped in-process
        assert project is not None and job is not None
        self._validator.check_project(project)
        d: Deferred[Any] = self._runner.cancel(job)
        d.addCallbacks(lambda prevstate: {"prevstate": prevstate}, _refused, errbackArgs=(job,))
        return d

    def listjobs(self, p: Params) -> dict[str, Any]:
        """Pending, running and finished jobs with Scrapyd 1.6's fields (secrets redacted), and each job's
        ``ignored_settings`` (the settings sent that a spiderd job does not honour)."""
        project = p.get("project", False)
        if project is not None:
            self._validator.check_project(project)
        jobs = self._runner.jobs.values()
        running = sorted((j for j in jobs if j.state == RUNNING), key=lambda j: j.start_time or 0.0)
        return {
            "pending": [self._pending(j) for j in self._runner.pending()],
            "running": [self._running(j) for j in running],
            "finished": [self._finished(j) for j in _finished(jobs)],
        }

    def status(self, p: Params) -> dict[str, Any]:
        """The state of one job: pending, running, finished or null."""
        job_id, project = p.get("job"), p.get("project", False)
        if project is not None:
            self._validator.check_project(project)
        job = self._runner.jobs.get(job_id or "")
        state = None
        if job is not None and job.state in (PENDING, RUNNING):
            state = job.state
        elif job is not None and job.start_time is not None:
            state = FINISHED
        return {"currstate": state}

    def daemonstatus(self, p: Params) -> dict[str, Any]:
        """How many jobs are pending, running and finished."""
        jobs = self._runner.jobs.values()
        return {
            "pending": len(self._runner.pending()),
            "running": sum(1 for j in jobs if j.state == RUNNING),
            "finished": len(_finished(jobs)),
        }

    def listprojects(self, p: Params) -> dict[str, Any]:
        """The one project of this worker."""
        return {"projects": [self._validator.project]}

    def listversions(self, p: Params) -> dict[str, Any]:
        """spiderd's version for the project (no eggs here); none for another project, as Scrapyd."""
        project = p.get("project")
        assert project is not None
        self._validator.check_contained(project)
        return {"versions": list(self._validator.versions) if project == self._validator.project else []}

    def listspiders(self, p: Params) -> dict[str, Any]:
        """The configured sites."""
        project, version = p.get("project"), p.get("_version", False)
        assert project is not None
        self._validator.check_project(project)
        self._validator.check_version(version)
        return {"spiders": list(self._validator.spiders)}

    def addversion(self, p: Params) -> dict[str, Any]:
        """Scrapyd's parameter checks, then a refusal that says what this worker runs (it takes no eggs)."""
        project, version = p.get("project"), p.get("version")
        p.raw("egg")
        assert project is not None
        self._validator.check_contained(project)
        raise self._no_eggs(f"cannot add version '{version}' to project '{project}'")

    def delversion(self, p: Params) -> dict[str, Any]:
        """Scrapyd's checks, then a refusal: the spiders come from the configuration.  A version of another
        project is not found, as in Scrapyd 1.6 (whose egg storage looks for the egg file first)."""
        project, version = p.get("project"), p.get("version")
        assert project is not None
        self._validator.check_contained(project)
        if project != self._validator.project or version not in self._validator.versions:
            raise ApiError(f"version '{version}' not found")
        raise self._no_eggs(f"cannot delete version '{version}' of project '{project}'")

    def delproject(self, p: Params) -> dict[str, Any]:
        """Scrapyd's check (project), then a refusal: the project is the configuration's."""
        project = p.get("project")
        assert project is not None
        self._validator.check_contained(project)
        self._validator.check_project(project)
        raise self._no_eggs(f"cannot delete project '{project}'")

    def _no_eggs(self, refused: str) -> ApiError:
        """What a spiderd worker runs, for clients that deploy Scrapy projects (scrapyd-deploy)."""
        names = list(self._validator.spiders)
        spiders = ", ".join(names[:MAX_NAMES]) + (f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else "")
        return ApiError(f"{refused}: this is a spiderd worker, not Scrapyd, and it takes no eggs: it runs the spiders "
                        f"of its configuration's [[sites]] (project '{self._validator.project}', spiders: "
                        f"{spiders or 'none'}); add or change a spider in [[sites]] and restart the worker")

    # -- job views --------------------------------------------------------------------------------------------

    def _pending(self, job: Job) -> dict[str, Any]:
        return {
            **_job_head(job),
            "version": job.version,
            "settings": {k: redact_value(v) for k, v in job.settings.items()},
            "args": {k: redact_value(v) for k, v in job.args.items()},
            "ignored_settings": list(job.ignored_settings),
        }

    def _running(self, job: Job) -> dict[str, Any]:
        return {**_job_head(job), "pid": os.getpid(), "start_time": _when(job.start_time), **self._job_tail(job)}

    def _finished(self, job: Job) -> dict[str, Any]:
        return {**_job_head(job), "start_time": _when(job.start_time), "end_time": _when(job.end_time),
                **self._job_tail(job)}

    def _job_tail(self, job: Job) -> dict[str, Any]:
        """The last fields of a started job in listjobs.json: its log, no items URL, the settings ignored."""
        return {"log_url": self._log_url(job), "items_url": None, "ignored_settings": list(job.ignored_settings)}

    def _log_url(self, job: Job) -> str | None:
        """Scrapyd's ``/logs/<project>/<spider>/<job>.log`` when the job has a log, as Scrapyd checks the file."""
        return log_path(job) if self._runner.logs.has(job.id) else None


def _job_head(job: Job) -> dict[str, Any]:
    """The first fields of every job in listjobs.json (Scrapyd's order)."""
    return {"id": job.id, "project": job.project, "spider": job.spider}


def _finished(jobs: Iterable[Job]) -> list[Job]:
    """Ended jobs that had started (a job cancelled while pending is gone, as in Scrapyd), newest first."""
    ended = [j for j in jobs if j.state in ENDED and j.start_time is not None]
    return sorted(ended, key=lambda j: j.end_time or 0.0, reverse=True)


def _when(timestamp: float | None) -> str | None:
    """A time as Scrapyd shows it: ``str()`` of a local datetime."""
    return None if timestamp is None else str(datetime.fromtimestamp(timestamp))


def _refused(failure: Failure, job_id: str) -> Failure:
    """The API's answer to the runner's refusals (schedule and cancel)."""
    if failure.check(JobExists):
        raise ApiError(f"job '{job_id}' already exists (pending or running)")
    if failure.check(WorkerStopping):
        raise ApiError("the worker is shutting down: try another node, or again later", http.SERVICE_UNAVAILABLE)
    if storage_error(failure) is not None:
        raise ApiError(f"the worker cannot write its files now ({storage_error(failure)}): try another node, or "
                       "again later", http.SERVICE_UNAVAILABLE)
    return failure

"""Scrapyd's clients against a real worker on 127.0.0.1: deploy endpoints, job logs and pages, job settings.

scrapyd-client (``scrapyd-deploy``) and python-scrapyd-api are run for real where they are installed
(``pip install '.[test]'`` installs them); those tests skip otherwise.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.threads import deferToThread
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial import unittest

from tests.test_worker import WorkerTestBase

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "scrapyd-project")
NO_EGGS = "this is a spiderd worker, not Scrapyd, and it takes no eggs: it runs the spiders of its configuration's " \
          "[[sites]] (project 'spiderd', spiders: demo-shop); add or change a spider in [[sites]] and restart the worker"


def _scrapyd_api() -> Any:
    try:
        import scrapyd_api
    except ImportError:
        raise unittest.SkipTest("python-scrapyd-api is not installed (pip install '.[test]')") from None
    return scrapyd_api


def _deploy_command() -> str:
    found = shutil.which("scrapyd-deploy", path=os.path.dirname(sys.executable)) or shutil.which("scrapyd-deploy")
    if found is None:
        raise unittest.SkipTest("scrapyd-client is not installed (pip install '.[test]')")
    return found


class DeployTests(WorkerTestBase):
    """addversion.json, delversion.json and delproject.json: Scrapyd's checks, then a refusal that says why."""

    @defer.inlineCallbacks
    def test_answers_in_scrapyds_shape(self) -> Any:
        """Each answers HTTP 200 with status error: Scrapyd 1.6's message for a missing parameter or an unknown
        project or version, else what a spiderd worker runs; nothing is a 404."""
        service = self.worker()
        version = service.validator.versions[0]
        egg = {"files": {"egg": ("project.egg", b"PK\x05\x06" + b"\x00" * 18)}}
        cases: list[tuple[str, Any, dict[str, Any], str]] = [
            ("/addversion.json", [], {}, "'project' parameter is required"),
            ("/addversion.json", [("project", "spiderd")], {}, "'version' parameter is required"),
            ("/addversion.json", [("project", "spiderd"), ("version", "r1")], {}, "'egg' parameter is required"),
            ("/addversion.json", [("project", "spiderd"), ("version", "r1")], egg,
             "cannot add version 'r1' to project 'spiderd': " + NO_EGGS),
            ("/addversion.json", [("project", "new"), ("version", "r1"), ("egg", "\xff")], {},
             "cannot add version 'r1' to project 'new': " + NO_EGGS),
            ("/delversion.json", [], {}, "'project' parameter is required"),
            ("/delversion.json", [("project", "spiderd")], {}, "'version' parameter is required"),
            ("/delversion.json", [("project", "spiderd"), ("version", "r1")], {}, "version 'r1' not found"),
            ("/delversion.json", [("project", "nope"), ("version", version)], {}, f"version '{version}' not found"),
            ("/delversion.json", [("project", "spiderd"), ("version", version)], {},
             f"cannot delete version '{version}' of project 'spiderd': " + NO_EGGS),
            ("/delproject.json", [], {}, "'project' parameter is required"),
            ("/delproject.json", [("project", "nope")], {}, "project 'nope' not found"),
            ("/delproject.json", [("project", "spiderd")], {}, "cannot delete project 'spiderd': " + NO_EGGS),
        ]
        for endpoint, data, extra, message in cases:
            code, answer, _ = yield self.call("POST", endpoint, data, **extra)
            self.assertEqual((code, answer), (200, {"status": "error", "message": message, "node_name": "test-node"}),
                             f"{endpoint} {data!r}")
        code, answer, _ = yield self.call("GET", "/delproject.json?project=spiderd")
        self.assertEqual((code, answer["message"]), (200, "UnsupportedMethod: Expected one of [b'HEAD', b'OPTIONS', "
                                                          "b'POST']"))
        _, answer, _ = yield self.call("GET", "/listprojects.json")
        self.assertEqual(answer["projects"], ["spiderd"])

    @defer.inlineCallbacks
    def test_scrapyd_deploy(self) -> Any:
        """scrapyd-deploy of the example project prints the worker's refusal, not "Deploy failed (404)"."""
        command = _deploy_command()
        self.worker()
        project = os.path.join(self.tmp, "project")
        shutil.copytree(EXAMPLE, project)
        with open(os.path.join(project, "scrapy.cfg"), "a", encoding="utf-8") as f:
            f.write(f"\n[deploy:worker]\nurl = {self.api}/\nproject = spiderd\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPY")}
        out, err, code = yield getProcessOutputAndValue(command, ["worker", "-v", "r1"], env=env, path=project,
                                                        reactor=reactor)
        said = out.decode() + err.decode()
        self.assertNotIn("404", said)
        self.assertIn('Deploying to project "spiderd"', said)
        self.assertIn("Server response (200):", said)
        self.assertIn("cannot add version 'r1' to project 'spiderd': " + NO_EGGS, said)
        self.assertEqual(code, 0, said)  # scrapyd-deploy prints a 200 error answer and exits 0, as with Scrapyd

    @defer.inlineCallbacks
    def test_python_scrapyd_api(self) -> Any:
        """python-scrapyd-api raises ScrapydResponseError with the worker's message for each call."""
        scrapyd_api = _scrapyd_api()
        service = self.worker()
        version = service.validator.versions[0]
        api = scrapyd_api.ScrapydAPI(self.api)
        egg = os.path.join(self.tmp, "project.egg")
        with open(egg, "wb") as f:
            f.write(b"PK\x05\x06" + b"\x00" * 18)

        def raised(call: Any, *args: Any) -> str:
            try:
                call(*args)
            except scrapyd_api.exceptions.ScrapydResponseError as e:
                return str(e)
            return "no error"

        def calls() -> list[str]:
            with open(egg, "rb") as f:
                added = raised(api.add_version, "spiderd", "r1", f)
            return [added, raised(api.delete_version, "spiderd", version), raised(api.delete_project, "spiderd"),
                    raised(api.delete_project, "nope")]

        said = yield deferToThread(calls)  # the client blocks; the worker answers on this reactor
        self.assertEqual(said, ["cannot add version 'r1' to project 'spiderd': " + NO_EGGS,
                                f"cannot delete version '{version}' of project 'spiderd': " + NO_EGGS,
                                "cannot delete project 'spiderd': " + NO_EGGS,
                                "project 'nope' not found"])
        projects = yield deferToThread(api.list_projects)
        self.assertEqual(projects, ["spiderd"])

"""Real Scrapyd as a target: spiderd's batcher against Scrapyd 1.6 running the example Scrapy project.

    python bench/scrapyd_check.py                       # 1000 details in batches of 250, then the 128 KiB check
    python bench/scrapyd_check.py --details 400 --batch-size 100 --keep

Slow (a minute or two; the first run also builds a venv).  Steps:

1. a venv (``--venv``, made once) with ``scrapyd==1.6.*`` and ``spiderd[scrapy]`` from this tree
   (spiderd is reinstalled at every run, so the workers run the tree's code);
2. the demo site (``python -m spiderd.demo.site --port 0 --no-faults``) on 127.0.0.1;
3. Scrapyd on 127.0.0.1 and a free port, with a generated ``scrapyd.conf`` in a temporary directory,
   ``SPIDERD_CONFIG`` pointing at the example project's ``spiderd.toml``;
4. ``examples/scrapyd-project`` built as an egg (``setup.py bdist_egg``) and uploaded with ``addversion.json``;
5. spiderd's ``Batcher`` (memory pool) sends the site's detail URLs in batches to ``schedule.json``
   with ``FEED_URI=file:///<tmp>/feeds/%(batch)s_%(name)s_%(time)s.jl``; ``listjobs.json`` is polled until
   every job has finished;
6. the 128 KiB limit: one batch whose ``DISTRIBUTED_START_URLS`` setting is over 128 KiB is POSTed by hand
   to a second Scrapyd (one process slot), between two 10-URL jobs; what Scrapyd answers and what becomes
   of the jobs is printed.  Then the same URLs go through the batcher in one batch, which splits it
   under ``max_setting_bytes``, to the first Scrapyd;
7. every detail URL sent by the batcher must be exactly one item in the feeds, equal to what
   ``spiderd.fetch.extract`` makes of the same page (``fetched_at`` aside).

Prints a summary and ends with one ``RESULT`` line; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EXAMPLE = ROOT / "examples" / "scrapyd-project"
PROJECT = "spiderd"  # the Scrapyd project name; [batch] project's default
SPIDER = "demo-shop"  # the example spider, named after the spiderd site it applies
ARG_MAX_STRLEN = 128 * 1024  # Linux's MAX_ARG_STRLEN: the longest single argument execve() takes


def step(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# -- the environment --------------------------------------------------------------------------------------------


def ensure_venv(venv: Path) -> Path:
    """The venv's python, with scrapyd 1.6, Scrapy and this tree's spiderd[scrapy] installed."""
    python = venv / "bin" / "python"
    quiet = ["--quiet", "--disable-pip-version-check"]
    if not (venv / "bin" / "scrapyd").exists():
        step(f"creating {venv} (scrapyd==1.6.*, spiderd[scrapy] from {ROOT})")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", *quiet, "scrapyd==1.6.*", f"{ROOT}[scrapy]"], check=True)
    step(f"reinstalling spiderd from {ROOT} into {venv}")
    subprocess.run([str(python), "-m", "pip", "install", *quiet, "--no-deps", "--force-reinstall", str(ROOT)],
                   check=True)
    versions = subprocess.run(
        [str(python), "-c", "import scrapyd, scrapy, twisted, spiderd.contrib.scrapy; "
         "print(scrapyd.__version__, scrapy.__version__, twisted.__version__)"],
        check=True, capture_output=True, text=True, cwd="/",
    ).stdout.split()
    step(f"Scrapyd {versions[0]}, Scrapy {versions[1]}, Twisted {versions[2]}")
    if not versions[0].startswith("1.6"):
        raise SystemExit(f"{venv} has Scrapyd {versions[0]}, not 1.6: remove it or pass another --venv")
    return python


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_site(work: Path, lists: int, details: int) -> tuple[subprocess.Popen[str], int]:
    command = [sys.executable, "-m", "spiderd.demo.site", "--port", "0", "--no-faults",
               "--lists", str(lists), "--details", str(details)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=open(work / "site.log", "w"), text=True,
                             cwd=str(ROOT), env=env)
    line = child.stdout.readline() if child.stdout else ""
    if not line.startswith("LISTENING "):
        raise SystemExit(f"the demo site did not start: {(work / 'site.log').read_text()[-500:]}")
    return child, int(line.split()[1])


SCRAPYD_CONF = """\
[scrapyd]
bind_address = 127.0.0.1
http_port = {port}
eggs_dir = {work}/eggs
logs_dir = {work}/logs
# no items_dir: Scrapyd would add its own FEEDS next to the batcher's FEED_URI
items_dir =
dbs_dir = {work}/dbs
jobs_to_keep = 1000
finished_to_keep = 1000
max_proc = {max_proc}
poll_interval = 0.5
"""


def start_scrapyd(python: Path, work: Path, config: Path, max_proc: int) -> tuple[subprocess.Popen[bytes], str]:
    """Scrapyd on 127.0.0.1:<free port>, its scrapyd.conf and logs in ``work`` (its working directory)."""
    port = free_port()
    (work / "scrapyd.conf").write_text(SCRAPYD_CONF.format(port=port, work=work, max_proc=max_proc))
    env = {**os.environ, "SPIDERD_CONFIG": str(config)}
    env.pop("PYTHONPATH", None)
    scrapyd = python.parent / "scrapyd"
    child = subprocess.Popen([str(scrapyd), "--pidfile=", f"--logfile={work / 'scrapyd.log'}"], cwd=str(work),
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise SystemExit(f"scrapyd exited: {(work / 'scrapyd.log').read_text()[-2000:]}")
        try:
            if get(base, "daemonstatus.json")["status"] == "ok":
                return child, base
        except OSError:
            time.sleep(0.2)
    raise SystemExit("scrapyd did not answer daemonstatus.json within 60 s")


# -- Scrapyd's API (blocking; called outside the reactor thread) -------------------------------------------------


def get(base: str, endpoint: str, **query: str) -> Any:
    url = f"{base}/{endpoint}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def post(base: str, endpoint: str, fields: list[tuple[str, str]]) -> Any:
    body = urllib.parse.urlencode(fields).encode()
    with urllib.request.urlopen(f"{base}/{endpoint}", data=body, timeout=60) as response:
        return json.loads(response.read())


def deploy(python: Path, base: str, work: Path) -> str:
    """Build the example project's egg and upload it with addversion.json; the version."""
    project = work / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"))
    subprocess.run([str(python), "setup.py", "-q", "bdist_egg", "-d", str(work / "dist")], cwd=str(project),
                   check=True, capture_output=True)
    (egg,) = (work / "dist").glob("*.egg")
    version = time.strftime("%Y%m%d%H%M%S")
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in (("project", PROJECT), ("version", version)):
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="egg"; filename="{egg.name}"\r\n'
                 f"Content-Type: application/octet-stream\r\n\r\n".encode() + egg.read_bytes() + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    request = urllib.request.Request(f"{base}/addversion.json", data=b"".join(parts),
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.loads(response.read())
    if answer.get("status") != "ok":
        raise SystemExit(f"addversion.json refused the egg: {answer}")
    spiders = get(base, "listspiders.json", project=PROJECT)
    step(f"deployed {egg.name} ({egg.stat().st_size} bytes) as {PROJECT} {version}: spiders {spiders.get('spiders')}")
    if SPIDER not in spiders.get("spiders", []):
        raise SystemExit(f"the egg has no spider {SPIDER!r}: {spiders}")
    return version


def jobs(base: str) -> dict[str, dict[str, Any]]:
    """job id -> the job's listjobs.json entry with its state (pending, running or finished)."""
    listed = get(base, "listjobs.json", project=PROJECT)
    return {job["id"]: {**job, "state": state} for state in ("pending", "running", "finished")
            for job in listed.get(state, [])}


def wait_finished(base: str, before: set[str], count: int, timeout: float) -> dict[str, dict[str, Any]]:
    """The jobs not in ``before``, once ``count`` of them are listed and all finished (or at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        new = {k: v for k, v in jobs(base).items() if k not in before}
        if len(new) >= count and all(j["state"] == "finished" for j in new.values()):
            return new
        if time.monotonic() > deadline:
            return new
        time.sleep(0.5)


# -- the batcher --------------------------------------------------------------------------------------------------


class RecordingClient:
    """The batcher's treq client, noting the size of each POST's DISTRIBUTED_START_URLS setting."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.setting_bytes: list[int] = []

    def post(self, url: str, data: list[tuple[str, str]], **kwargs: Any) -> Any:
        from spiderd.frontier.batchwire import SETTING_PREFIX

        self.setting_bytes += [len(v.encode()) for k, v in data if k == "setting" and v.startswith(SETTING_PREFIX)]
        return self._client.post(url, data=data, **kwargs)


def run_batcher(reactor: Any, pool: Any, spool: Path, target: str, feed_uri: str, urls: list[str],
                batch_size: int) -> Any:
    """Fires with the batcher's status once every URL was accepted by Scrapyd (sealed, split, POSTed)."""
    from twisted.internet import defer

    from spiderd.config.sections import BatchSection
    from spiderd.frontier.batcher import Batcher
    from spiderd.frontier.batchwire import make_client
    from spiderd.core.lifecycle import wait_until

    config = BatchSection((target,), project=PROJECT, spider=SPIDER, feed_uri=feed_uri or "", size=batch_size,
                          flush_interval=1.0, timeout=30.0)
    http = RecordingClient(make_client(reactor))
    batcher = Batcher(reactor, pool, str(spool), config, http=http, retry_first=1.0, retry_max=5.0)

    @defer.inlineCallbacks
    def go() -> Any:
        batcher.startService()
        for at in range(0, len(urls), 100):
            yield batcher.add(urls[at:at + 100])
        yield batcher.flush()
        yield wait_until(reactor, batcher.idle, 0.1)
        status = batcher.status()
        status["setting_bytes"] = http.setting_bytes
        yield batcher.stopService()
        return status

    return go()


# -- checking the feeds --------------------------------------------------------------------------------------------


def read_feeds(feeds: Path) -> dict[str, list[dict[str, Any]]]:
    """feed file name -> its items."""
    out = {}
    for path in sorted(glob.glob(str(feeds / "*.jl"))):
        with open(path, encoding="utf-8") as f:
            out[os.path.basename(path)] = [json.loads(line) for line in f if line.strip()]
    return out


def check_items(items: list[dict[str, Any]], expected_urls: list[str], spec: Any, base_url: str) -> list[str]:
    """Problems: URLs without exactly one item, unexpected items, items that differ from spiderd's extraction."""
    from spiderd.demo.pages import render
    from spiderd.fetch.extract import Rules, extract
    from spiderd.config.settings import load

    rules = Rules(tuple(s for s in load(str(EXAMPLE / "spiderd.toml")).sites if s.name == SPIDER))
    problems: list[str] = []
    by_url: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        by_url.setdefault(item.get("url", ""), []).append(item)
    for url in expected_urls:
        count = len(by_url.get(url, []))
        if count != 1:
            problems.append(f"{url}: {count} items")
    for url in set(by_url) - set(expected_urls):
        problems.append(f"unexpected item for {url!r}")
    from spiderd.demo.pages import render

    for url, found in by_url.items():
        if url not in expected_urls or not found:
            continue
        item = found[0]
        status, headers, body = render(spec, url[len(base_url):])
        mine = extract(url, body, headers[b"content-type"].decode(), "detail", item["fetched_at"], status, rules).item
        if item != mine:
            problems.append(f"{url}: item {item} differs from spiderd's {mine}")
    return problems


# -- main ------------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "spiderd-scrapyd-venv")
    parser.add_argument("--details", type=int, default=1000, help="detail URLs sent in ordinary batches")
    parser.add_argument("--batch-size", type=int, default=250)
    parser.add_argument("--oversize", type=int, default=3600,
                        help="detail URLs in the over-128-KiB batch (about 41 bytes of JSON each)")
    parser.add_argument("--max-proc", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the jobs of one phase")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()

    python = ensure_venv(args.venv)
    work = Path(tempfile.mkdtemp(prefix="spiderd-scrapyd-check-"))
    feeds = work / "feeds"
    children: list[subprocess.Popen[Any]] = []
    try:
        from spiderd.demo.pages import SiteSpec

        total = args.details + args.oversize
        lists = max(1, total // 100)
        spec = SiteSpec(lists=lists, details=total, faults=False)
        site, site_port = start_site(work, lists, total)
        children.append(site)
        site_url = f"http://127.0.0.1:{site_port}"
        step(f"demo site on {site_url}/ ({total} detail pages)")
        scrapyd, base = start_scrapyd(python, work, EXAMPLE / "spiderd.toml", args.max_proc)
        children.append(scrapyd)
        step(f"scrapyd on {base} (work directory {work})")
        deploy(python, base, work)

        normal = [f"{site_url}/item/{n}.html" for n in range(1, args.details + 1)]
        oversize = [f"{site_url}/item/{n}.html" for n in range(args.details + 1, total + 1)]
        feed_uri = f"file://{feeds}/%(batch)s_%(name)s_%(time)s.jl"
        outcome = run_phases(args, python, base, work, site_url, feed_uri, normal, oversize)

        feeds_read = read_feeds(feeds)
        batch_items = [item for items in feeds_read.values() for item in items]
        expected = normal + oversize
        problems = check_items(batch_items, expected, spec, site_url)
        finished = sum(1 for j in outcome["jobs"].values() if j["state"] == "finished")

        print()
        print("Summary")
        print(f"  ordinary batches: {outcome['normal']['sent']} accepted, {outcome['normal']['urls_sent']} URLs, "
              f"settings of {min(outcome['normal']['setting_bytes'])}..{max(outcome['normal']['setting_bytes'])} bytes")
        hand = outcome["hand"]
        print(f"  oversize by hand: DISTRIBUTED_START_URLS of {hand['bytes']:,} bytes (Linux's limit for one "
              f"argument: {ARG_MAX_STRLEN:,}): schedule.json answered {hand['answer'].get('status')!r}; the job "
              f"{hand['fate']}; items: {hand['items']}; process slot lost: {'yes' if hand['slot_lost'] else 'no'}")
        for line in hand["evidence"]:
            print(f"    {line}")
        print(f"  same URLs through the batcher, sealed as one batch: split and sent as {outcome['split']['sent']} "
              f"batches, settings of {outcome['split_sizes']} bytes (max_setting_bytes "
              f"{outcome['max_setting_bytes']:,}); all accepted and run")
        print(f"  Scrapyd jobs from the batcher: {len(outcome['jobs'])} listed, {finished} finished")
        print(f"  feeds: {len(feeds_read)} files, {len(batch_items)} items from the batcher's jobs, "
              f"{len(expected)} detail URLs sent")
        for problem in problems[:20]:
            print(f"  PROBLEM {problem}")
        if len(problems) > 20:
            print(f"  ... {len(problems) - 20} more problems")
        accepted = outcome["normal"]["sent"] + outcome["split"]["sent"]
        good = (not problems and finished == accepted == len(outcome["jobs"]) and len(batch_items) == len(expected)
                and len(outcome["split_sizes"]) >= 2
                and all(size <= outcome["max_setting_bytes"] for size in outcome["split_sizes"]))
        print(f"RESULT scrapyd_batches_accepted={accepted} scrapyd_jobs_finished={finished} "
              f"items={len(batch_items)} expected={len(expected)}")
        if not good:
            sys.exit(1)
    finally:
        for child in reversed(children):
            child.terminate()
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if args.keep:
            print(f"(kept {work})")
        else:
            shutil.rmtree(work, ignore_errors=True)


def run_phases(args: argparse.Namespace, python: Path, base: str, work: Path, site_url: str, feed_uri: str,
               normal: list[str], oversize: list[str]) -> dict[str, Any]:
    """The reactor part: batches, the hand-made oversize job, the split batch; blocking calls in threads."""
    from twisted.internet import defer, reactor, threads

    from spiderd.config.sections import BatchSection
    from spiderd.frontier.pool import open_memory_pool

    pool = open_memory_pool(reactor)
    target = base.removeprefix("http://")
    outcome: dict[str, Any] = {"jobs": {}}

    @defer.inlineCallbacks
    def phases() -> Any:
        # 1. the ordinary path: batches of --batch-size
        before = set((yield threads.deferToThread(jobs, base)))
        step(f"batcher: {len(normal)} detail URLs in batches of {args.batch_size}")
        outcome["normal"] = yield run_batcher(reactor, pool, work / "spool-1", target, feed_uri, normal,
                                              args.batch_size)
        new = yield threads.deferToThread(wait_finished, base, before, outcome["normal"]["sent"], args.timeout)
        outcome["jobs"].update(new)
        step(f"{outcome['normal']['sent']} batches accepted, {sum(j['state'] == 'finished' for j in new.values())} "
             "jobs finished")

        # 2. over 128 KiB by hand, as a sender that does not split would send it, to a Scrapyd of its own
        step(f"oversize batch by hand: {len(oversize)} URLs in one setting, to a second Scrapyd (max_proc 1)")
        outcome["hand"] = yield threads.deferToThread(oversize_by_hand, python, work / "probe", site_url, oversize)
        step(f"the oversize job: {outcome['hand']['fate']}")

        # 3. the same URLs through the batcher, in one batch: split under max_setting_bytes
        max_bytes = BatchSection(("x:1",)).max_setting_bytes
        outcome["max_setting_bytes"] = max_bytes
        before = set((yield threads.deferToThread(jobs, base)))
        step(f"batcher: the same {len(oversize)} URLs in one batch (batch_size {len(oversize)})")
        outcome["split"] = yield run_batcher(reactor, pool, work / "spool-2", target, feed_uri, oversize,
                                             len(oversize))
        new = yield threads.deferToThread(wait_finished, base, before, outcome["split"]["sent"], args.timeout)
        outcome["jobs"].update(new)
        outcome["split_sizes"] = outcome["split"]["setting_bytes"]
        step(f"{outcome['split']['sent']} batches accepted (settings of {outcome['split_sizes']} bytes), "
             f"{sum(j['state'] == 'finished' for j in new.values())} jobs finished")

    def done(result: Any) -> Any:
        if reactor.running:
            reactor.stop()
        return result

    failures: list[Any] = []
    reactor.callWhenRunning(lambda: phases().addErrback(failures.append).addBoth(done))
    reactor.run()
    if failures:
        failures[0].raiseException()
    return outcome


def oversize_by_hand(python: Path, work: Path, site_url: str, urls: list[str]) -> dict[str, Any]:
    """POST one batch whose DISTRIBUTED_START_URLS is over 128 KiB to a fresh Scrapyd with one process slot.

    A 10-URL job runs first (how long a job takes here), then the oversize one, then the 10-URL job again.
    Returns what was seen: the answers, the oversize job's states, its log and feed, the second small job's
    state, error lines in scrapyd.log, and what ``reactor.spawnProcess`` (which Scrapyd's launcher calls)
    does with such an argument.
    """
    from spiderd.frontier.batchwire import SETTING_PREFIX

    work.mkdir()
    feeds = work / "feeds"
    feed_uri = f"file://{feeds}/%(batch)s_%(name)s_%(time)s.jl"
    scrapyd, base = start_scrapyd(python, work, EXAMPLE / "spiderd.toml", max_proc=1)
    small = [f"{site_url}/item/{n}.html" for n in range(1, 11)]

    def schedule(batch: str, batch_urls: list[str]) -> dict[str, Any]:
        answer: dict[str, Any] = post(base, "schedule.json", [
            ("project", PROJECT), ("spider", SPIDER), ("batch", batch),
            ("setting", f"FEED_URI={feed_uri}"), ("setting", SETTING_PREFIX + json.dumps(batch_urls)),
        ])
        return answer

    def watch(jobid: str, seconds: float) -> list[str]:
        states: list[str] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            job = jobs(base).get(jobid)
            state = job["state"] if job else "not listed"
            if not states or states[-1] != state:
                states.append(state)
            if state == "finished":
                break
            time.sleep(0.25)
        return states

    try:
        deploy(python, base, work)
        started = time.monotonic()
        first = schedule("probe-before", small)
        watch(first["jobid"], 120)
        baseline = time.monotonic() - started
        setting = SETTING_PREFIX + json.dumps(urls)
        answer = schedule("oversize", urls)
        states = watch(answer.get("jobid", ""), max(15.0, 3 * baseline))
        second = schedule("probe-after", small)
        wait = max(20.0, 5 * baseline)
        after = watch(second["jobid"], wait)
        daemon = get(base, "daemonstatus.json")
    finally:
        scrapyd.terminate()
        scrapyd.wait(30)
    log_file = work / "logs" / PROJECT / SPIDER / f"{answer.get('jobid')}.log"
    items = {name: len(found) for name, found in read_feeds(feeds).items()}
    scrapyd_log = (work / "scrapyd.log").read_text(errors="replace")
    logged = "Argument list too long" in scrapyd_log
    spawn = subprocess.run(
        [str(python), "-c", "from twisted.internet import reactor, protocol\n"
         "try:\n    reactor.spawnProcess(protocol.ProcessProtocol(), '/bin/true', ['/bin/true', 'x' * 140000])\n"
         "except OSError as e:\n    print('OSError:', e)\nelse:\n    print('spawned')\n"],
        capture_output=True, text=True, cwd="/",
    ).stdout.strip()
    fate = " -> ".join(states)
    return {
        "bytes": len(setting.encode()),
        "answer": answer,
        "fate": f"listed {fate}" + ("" if states[-1] == "finished" else f" (watched {max(15.0, 3 * baseline):.0f} s)"),
        "items": sum(n for name, n in items.items() if name.startswith("oversize_")),
        "evidence": [
            f"a 10-URL job before it: finished in {baseline:.1f} s",
            f"schedule.json for the {len(setting.encode()):,}-byte setting answered {answer}",
            f"its job log: {'written' if log_file.exists() else 'never written'}; its feed: "
            f"{sum(n for name, n in items.items() if name.startswith('oversize_'))} items",
            f"a 10-URL job after it: {' -> '.join(after)} after {wait:.0f} s; daemonstatus.json: "
            f"pending={daemon.get('pending')} running={daemon.get('running')} finished={daemon.get('finished')}",
            "scrapyd.log: " + ("the launcher's OSError (Argument list too long), as a critical 'Unhandled error in "
                               "Deferred' (logged only when that Deferred is garbage-collected)" if logged else
                               "nothing about it (the OSError sits in an unreferenced Deferred, not yet collected)"),
            f"reactor.spawnProcess with one 140,000-byte argument (what Scrapyd's launcher does): {spawn}",
        ],
        "slot_lost": after[-1] != "finished",
    }


if __name__ == "__main__":
    main()

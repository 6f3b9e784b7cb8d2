"""spiderctl: a running spiderd from the command line, through its HTTP API (urllib only, no Twisted).

    spiderctl status [--json]
    spiderctl add seeds|hubs|urls [URL ...] [-f FILE] [--detail] [--refresh-span SECONDS] [--recrawl]
    spiderctl pause | resume
    spiderctl why URL [--json]
    spiderctl jobs | failures | hosts [--limit N] [--json]
    spiderctl export [-o FILE]
    spiderctl import FILE
    spiderctl try URL [--site NAME] [--field name=SELECTOR ...] [--json]

Exit status: 0 done, 1 spiderd refused the request (its message is shown), 2 bad usage,
3 spiderd cannot be reached, 4 wrong or missing credentials.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import IO, Any, Iterable, Iterator, Sequence

from spiderd.ops.ctlclient import OK, USAGE, Client, CtlError, json_answer
from spiderd.ops.ctltry import cmd_try
from spiderd.ops.listings import cmd_failures, cmd_hosts, cmd_jobs

DEFAULT_URL = "http://127.0.0.1:6810"
MAX_URLS = 10_000  # per request, as the API caps it
IMPORT_LINES = 5_000  # per request
IMPORT_BYTES = 8 * 1024 * 1024


# -- commands -------------------------------------------------------------------------------------------------


def cmd_status(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    status = client.call("GET", "/api/status")
    out.write(json.dumps(status, indent=2) + "\n" if args.json else summary(status))
    return OK


def cmd_add(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    urls = list(_urls(args.urls, args.file))
    if not urls:
        raise CtlError("no URLs given: name them, or give -f FILE (- for stdin)", USAGE)
    payload: dict[str, Any] = {}
    if args.what == "hubs" and args.refresh_span is not None:
        payload["refresh_span"] = args.refresh_span
    if args.what == "urls":
        payload["kind"] = "detail" if args.detail else "list"
    if args.recrawl:
        if args.what == "hubs":
            raise CtlError("--recrawl is for seeds and urls (a hub is fetched again every refresh span)", USAGE)
        payload["recrawl"] = True
    added = known = 0
    rejected: list[dict[str, str]] = []
    for start in range(0, len(urls), MAX_URLS):
        answer = client.call("POST", f"/api/{args.what}", {"urls": urls[start : start + MAX_URLS], **payload})
        added, known = added + answer["added"], known + answer["known"]
        rejected += answer["rejected"]
    for r in rejected:
        sys.stderr.write(f"spiderctl: rejected {r['url']} ({r['reason']})\n")
    out.write(f"{args.what}: {added} added, {known} known, {len(rejected)} rejected\n")
    return OK


def cmd_pause(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    answer = client.call("POST", f"/api/{args.command}")
    out.write("the crawl is paused\n" if answer["paused"] else "the crawl runs\n")
    return OK


def cmd_why(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    from urllib.parse import quote

    info = client.call("GET", "/api/why?url=" + quote(args.target, safe=""))
    if args.json:
        out.write(json.dumps(info, indent=2) + "\n")
        return OK
    out.write(f"{info.get('url', args.target)}: {info['state']}\n  {info['reason']}\n")
    details = [f"{key}: {info[key]}" for key in ("kind", "failures", "robots", "host_waiting", "host_inflight",
                                                 "host_next_in", "lease_remaining") if key in info]
    if "rule" in info:
        details.append(f"rule: {info['rule'].get('kind') or 'none'} (site {info['rule'].get('site') or 'none'})")
    if details:
        out.write("  " + "; ".join(details) + "\n")
    if "parent" in info:  # the linkbase entry (seed 004)
        out.write(f"  first linked from {info['parent']} by {info.get('anchor', '')!r}"
                  f" at {info.get('xpath') or '(no xpath)'}\n")
    last = info.get("last_failure")
    if last:
        at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last["at"]))
        out.write(f"  last failure: {last['reason']} (failure {last['failures']}, at {at})\n")
    return OK


def cmd_export(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    to_file = bool(args.output and args.output != "-")
    if to_file:
        try:
            target: IO[bytes] = open(args.output, "wb")
        except OSError as e:
            raise CtlError(f"cannot write {args.output}: {e.strerror}", USAGE) from None
    else:
        out.flush()
        target = out.buffer  # type: ignore[attr-defined]  # out is a text stream with one (sys.stdout)
    lines = 0
    try:
        with client.open("GET", "/api/export") as response:
            for line in response:
                if line.startswith(b'{"error"'):
                    raise CtlError(f"the export stopped after {lines} entries: {json.loads(line)['error']}")
                target.write(line)
                lines += 1
    finally:
        target.close() if to_file else target.flush()
    sys.stderr.write(f"spiderctl: exported {lines} entries\n")
    return OK


def cmd_import(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    source: IO[bytes] = sys.stdin.buffer if args.file == "-" else _open(args.file)
    totals = {"queued": 0, "restored": 0, "known": 0, "rejected_count": 0}
    shown = 0
    with source:
        for first, chunk in _chunks(source):
            answer = _import(client, b"".join(chunk))
            for key in totals:
                totals[key] += answer[key]
            for r in answer["rejected"]:
                if shown < 20:
                    sys.stderr.write(f"spiderctl: line {first + r['line'] - 1} rejected: {r['reason']}\n")
                shown += 1
    out.write(f"imported: {totals['queued']} URLs queued, {totals['restored']} finished entries restored, "
              f"{totals['known']} known, {totals['rejected_count']} rejected\n")
    return OK


def _import(client: Client, body: bytes) -> dict[str, Any]:
    with client.open("POST", "/api/import", body, "application/x-ndjson") as response:
        return json_answer(response.read(), client.base)


def _chunks(source: IO[bytes]) -> Iterator[tuple[int, list[bytes]]]:
    """(number of the first line, lines) of at most IMPORT_LINES lines and about IMPORT_BYTES bytes."""
    chunk: list[bytes] = []
    size = 0
    first = 1
    for number, line in enumerate(source, 1):
        if not chunk:
            first = number
        chunk.append(line if line.endswith(b"\n") else line + b"\n")
        size += len(line)
        if len(chunk) >= IMPORT_LINES or size >= IMPORT_BYTES:
            yield first, chunk
            chunk, size = [], 0
    if chunk:
        yield first, chunk


def _open(path: str) -> IO[bytes]:
    try:
        return open(path, "rb")
    except OSError as e:
        raise CtlError(f"cannot read {path}: {e.strerror}", USAGE) from None


def _urls(named: Sequence[str], path: str | None) -> Iterable[str]:
    sources: list[Iterable[str]] = []
    for item in named:
        sources.append(_lines(sys.stdin) if item == "-" else [item])
    if path:
        sources.append(_lines(sys.stdin) if path == "-" else _lines(_open_text(path)))
    for source in sources:
        yield from source


def _open_text(path: str) -> IO[str]:
    try:
        return open(path, encoding="utf-8")
    except OSError as e:
        raise CtlError(f"cannot read {path}: {e.strerror}", USAGE) from None


def _lines(stream: IO[str]) -> Iterator[str]:
    for line in stream:
        line = line.strip()
        if line and not line.startswith("#"):
            yield line


# -- the human summary ----------------------------------------------------------------------------------------


def summary(s: dict[str, Any]) -> str:
    """``spiderctl status`` without --json: a few lines, the parts this role has."""
    rates = s.get("rates", {})
    lines = [f"spiderd {s.get('version')} ({s.get('role')} role), up {_duration(s.get('uptime', 0))}"]
    crawler = s.get("crawler")
    if crawler:
        lines.append(f"crawl:    {crawler['state']}, {crawler['fetching']} fetching, {crawler['processing']} processing")
    lines.append(f"pages:    {s.get('pages', 0):,} ({rates.get('pages_per_min_last_minute', 0):,.1f}/min last minute, "
                 f"{rates.get('pages_per_min_last_hour', 0):,.1f}/min last hour)"
                 + (f", {_bytes(s['counts'].get('bytes', 0))}" if "counts" in s else ""))
    pool = s.get("pool")
    if pool:
        largest = ", ".join(f"{h} {n:,}" for h, n in pool.get("largest", [])[:3]) or "none"
        lines.append(f"pool:     {pool['waiting']:,} waiting, {pool['pending']:,} pending, {pool['done']:,} done, "
                     f"{pool['failed']:,} failed, {pool['batched']:,} batched; {pool['hosts']:,} hosts "
                     f"(largest: {largest})")
    if s.get("errors"):
        lines.append("errors:   " + _counter(s["errors"]))
    if s.get("statuses"):
        lines.append("statuses: " + _counter(s["statuses"]))
    if "batches" in s:
        b = s["batches"]
        lines.append(f"batches:  {b['sent']:,} sent, {b['in_flight']} in flight, {b['spooled']} spooled, "
                     f"{b['open']} URLs in the open batch, {b['failures']} failures")
    if "feeds" in s:
        f = s["feeds"]
        lines.append(f"feeds:    {f['shipped']:,} shipped, {f['waiting']} waiting, {f['failures']} failures")
    if "worker" in s:
        w = s["worker"]
        lines.append(f"worker:   {w['jobs_running']} jobs running, {w['jobs_pending']} pending, {w['pages']:,} pages")
    if "store" in s:
        lines.append(f"store:    {s['store']['pending']} writes pending ({s['store']['where']})")
    return "\n".join(lines) + "\n"


def _counter(values: dict[str, int]) -> str:
    return ", ".join(f"{k}={v:,}" for k, v in sorted(values.items(), key=lambda kv: -kv[1]))


def _duration(seconds: float) -> str:
    s = int(seconds)
    days, hours, minutes = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if days:
        return f"{days}d {hours}h{minutes:02d}m"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{s % 60:02d}s"


def _bytes(count: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if count < 1000:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} TB"


# -- the command line -----------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spiderctl", description="Talk to a running spiderd through its HTTP API.",
                                epilog="Exit status: 0 done, 1 refused by spiderd, 2 bad usage, 3 spiderd "
                                       "unreachable, 4 wrong or missing credentials.")
    p.add_argument("--url", default=os.environ.get("SPIDERD_URL", DEFAULT_URL),
                   help=f"the API (env SPIDERD_URL; default {DEFAULT_URL})")
    p.add_argument("--token", default=os.environ.get("SPIDERD_TOKEN", ""), help="api.token (env SPIDERD_TOKEN)")
    p.add_argument("--user", default=os.environ.get("SPIDERD_USER", ""), help="api.username (env SPIDERD_USER)")
    p.add_argument("--password", default=os.environ.get("SPIDERD_PASSWORD", ""),
                   help="api.password (env SPIDERD_PASSWORD)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for an answer (default 30)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    status = sub.add_parser("status", help="a summary of the node (--json: everything)")
    status.add_argument("--json", action="store_true")
    add = sub.add_parser("add", help="add seeds, hubs or URLs (arguments, -f FILE, - for stdin)")
    add.add_argument("what", choices=("seeds", "hubs", "urls"))
    add.add_argument("urls", nargs="*", metavar="URL", help="URLs; - reads them from stdin, one a line")
    add.add_argument("-f", "--file", help="a file of URLs, one a line (# comments); - for stdin")
    add.add_argument("--detail", action="store_true", help="urls: detail pages (to the batcher or the detail queue)")
    add.add_argument("--refresh-span", type=float, help="hubs: seconds between two fetches of every hub")
    add.add_argument("--recrawl", action="store_true", help="seeds, urls: queue done URLs again")
    jobs = sub.add_parser("jobs", help="the worker's jobs: running, pending, then ended (newest first)")
    jobs.add_argument("--limit", type=int, default=50, help="at most this many (1-1000, default 50)")
    jobs.add_argument("--json", action="store_true")
    failures = sub.add_parser("failures", help="the last URLs that failed for good here, newest first, with why")
    failures.add_argument("--limit", type=int, default=20, help="at most this many (1-1000, default 20)")
    failures.add_argument("--json", action="store_true")
    hosts = sub.add_parser("hosts", help="the hosts to look at first: throttled, then the most waiting URLs")
    hosts.add_argument("--limit", type=int, default=20, help="at most this many (1-200, default 20)")
    hosts.add_argument("--json", action="store_true")
    sub.add_parser("pause", help="stop fetching new URLs (fetches in flight finish)")
    sub.add_parser("resume", help="fetch again")
    why = sub.add_parser("why", help="why is this URL (not) crawled?")
    why.add_argument("target", metavar="URL")
    why.add_argument("--json", action="store_true")
    export = sub.add_parser("export", help="the pool as JSON lines (finished URLs as fingerprints)")
    export.add_argument("-o", "--output", help="a file (default: stdout)")
    imp = sub.add_parser("import", help="JSON lines from export back into the pool")
    imp.add_argument("file", help="the export file; - for stdin")
    tried = sub.add_parser("try", help="fetch a page and show what a site's rules (or a draft) extract of it")
    tried.add_argument("target", metavar="URL")
    tried.add_argument("--site", help="the site (default: the one allowing the URL's host)")
    tried.add_argument("--field", action="append", default=[], metavar="name=SELECTOR",
                       help="a draft field: an XPath, or css:SELECTOR (repeatable; never saved)")
    tried.add_argument("--json", action="store_true")
    return p


def _parse(p: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """parse_args, but URLs after an option of ``add`` are URLs too (argparse stops at the first option)."""
    args, extras = p.parse_known_args(argv)
    if extras and args.command == "add" and not any(e.startswith("-") and e != "-" for e in extras):
        args.urls += extras
    elif extras:
        p.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


COMMANDS = {"status": cmd_status, "jobs": cmd_jobs, "failures": cmd_failures, "hosts": cmd_hosts, "add": cmd_add,
            "pause": cmd_pause, "resume": cmd_pause, "why": cmd_why, "export": cmd_export, "import": cmd_import,
            "try": cmd_try}


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    """Run one command; returns (and, as a console script, exits with) its status."""
    out = out or sys.stdout
    try:
        args = _parse(parser(), argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.user and not args.password:
        sys.stderr.write("spiderctl: --user needs --password (or SPIDERD_PASSWORD)\n")
        return USAGE
    client = Client(args.url, args.token, args.user, args.password, args.timeout)
    try:
        return COMMANDS[args.command](client, args, out)
    except CtlError as e:
        sys.stderr.write(f"spiderctl: {e}\n")
        return e.status
    except BrokenPipeError:  # `spiderctl export | head`: no complaint when Python flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

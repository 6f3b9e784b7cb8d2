"""spiderctl's listings: the tables the status page shows too (jobs, failures, hosts), each one ``GET /api/<what>?limit=``
printed as text, or as it came with ``--json``."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from spiderd.ops.ctlclient import OK

if TYPE_CHECKING:
    from spiderd.ops.ctlclient import Client


def _listing(client: Client, args: argparse.Namespace, out: IO[str], what: str,
             empty: str) -> list[dict[str, Any]] | None:
    """``GET /api/<what>?limit=``: the rows to print, or None once the answer went out, whole as JSON (--json)
    or as the line ``empty`` says when there is no row."""
    answer = client.call("GET", f"/api/{what}?limit={args.limit}")
    if args.json:
        out.write(json.dumps(answer, indent=2) + "\n")
        return None
    rows = list(answer.get(what, []))
    if not rows:
        out.write(empty + "\n")
        return None
    return rows


def _columns(out: IO[str], head: Sequence[str], lines: list[Sequence[str]]) -> None:
    """``lines`` under ``head``, in columns (the last one as it is)."""
    table = [tuple(head)] + [tuple(line) for line in lines]
    widths = [max(len(line[i]) for line in table) for i in range(len(head) - 1)]
    for line in table:
        out.write("  ".join(v.ljust(w) for v, w in zip(line, widths)) + "  " + line[-1] + "\n")


def cmd_jobs(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    rows = _listing(client, args, out, "jobs", "no jobs")
    if rows is None:
        return OK
    _columns(out, ("STATE", "JOB", "SPIDER", "BATCH", "URLS", "ITEMS", "FAILED", "FEED"),
             [(r["state"], r["id"], r["spider"], r["batch"], f"{r['done']}/{r['urls']}", str(r["items"]),
               str(r["failed"]), f"{r['feed']['state']}" + (f" -> {r['feed']['uri']}" if r["feed"]["uri"] else ""))
              for r in rows])
    return OK


def cmd_failures(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    rows = _listing(client, args, out, "failures", "no URL failed for good (since this node started)")
    if rows is None:
        return OK
    for r in rows:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r["at"]))
        out.write(f"{at} UTC  {r['url']}\n    {r['reason']}  (spiderctl why URL tells more)\n")
    return OK


def cmd_hosts(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    rows = _listing(client, args, out, "hosts", "no host has waiting URLs")
    if rows is None:
        return OK
    _columns(out, ("HOST", "WAITING", "IN FLIGHT", "NEXT TURN", "DELAY", "ERRORS", "WHY"),
             [(r["host"], f"{r['waiting']:,}", f"{r['inflight']}/{r['concurrency']}", _next_turn(r),
               f"{r['delay']:g}s", "-" if r["errors"] is None else str(r["errors"]), _why(r)) for r in rows])
    return OK


def _next_turn(row: dict[str, Any]) -> str:
    if row.get("waiting_for_turn"):
        return "after a host in turn"
    if row["next_in"] > 0:
        return f"in {row['next_in']:.1f}s"
    return "when a fetch ends" if row["inflight"] >= row["concurrency"] else "now"


def _why(row: dict[str, Any]) -> str:
    why = row["delay_why"]
    if why == "throttled":
        until = time.strftime("%H:%M:%S UTC", time.gmtime(row["throttled_until"]))
        return f"throttled (429/503 Retry-After) until {until}"
    return {"adaptive": "adaptive (fetch times)", "crawl-delay": "Crawl-delay (robots.txt)",
            "configured": "configured"}.get(why, "no delay")

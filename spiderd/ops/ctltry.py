"""``spiderctl try URL [--site NAME] [--field name=SELECTOR ...]``: the template tester from the command line.

The site is the one named, else the one whose ``allowed_hosts`` allow the URL's host.  Each ``--field`` sets a field
of a draft of the site (an XPath, or ``css:SELECTOR``), tried on the page and never saved.  Prints what
``POST /api/sites/NAME/try`` answers: the fields as extracted, each selector's matches, the links by rule, the
warnings.
"""

from __future__ import annotations

import argparse
import json
from typing import IO, Any
from urllib.parse import quote, urlsplit

from spiderd.ops.ctlclient import OK, USAGE, Client, CtlError

SHOWN_LINKS = 10  # links shown per kind (all are counted)


def cmd_try(client: Client, args: argparse.Namespace, out: IO[str]) -> int:
    sites = {s["name"]: s["table"] for s in client.call("GET", "/api/sites")["sites"]}
    name = args.site or _site_of(args.target, sites)
    if name not in sites and not args.field:
        raise CtlError(f"no site named {name!r} (sites: {', '.join(sites) or 'none'})", USAGE)
    payload: dict[str, Any] = {"url": args.target}
    if args.field:
        draft = dict(sites.get(name) or {"allowed_hosts": [urlsplit(args.target).hostname or ""]})
        draft["fields"] = {**draft.get("fields", {}), **dict(_field(f) for f in args.field)}
        payload["site"] = draft
    client.csrf()
    answer = client.call("POST", f"/api/sites/{quote(name, safe='')}/try", payload)
    out.write(json.dumps(answer, indent=2) + "\n" if args.json else _text(answer))
    return OK


def _site_of(url: str, sites: dict[str, Any]) -> str:
    host = (urlsplit(url).hostname or "").lower()
    for name, table in sites.items():
        for allowed in table.get("allowed_hosts", []):
            allowed = allowed.lower().lstrip("*.")
            if host == allowed or host.endswith("." + allowed):
                return name
    raise CtlError(f"no site allows {host or url!r}: name one with --site", USAGE)


def _field(text: str) -> tuple[str, str]:
    name, sep, selector = text.partition("=")
    if not sep or not name.strip() or not selector.strip():
        raise CtlError(f"--field {text!r}: expected name=SELECTOR (an XPath, or css:SELECTOR)", USAGE)
    return name.strip(), selector.strip()


def _text(answer: dict[str, Any]) -> str:
    fetch = answer.get("fetch", {})
    lines = [f"{answer['url']}: HTTP {fetch.get('status')}, {fetch.get('bytes', 0)} bytes"
             f"{', rendered' if fetch.get('rendered') else ''}; site {answer['site']}"
             f"{' (draft)' if answer.get('draft') else ''}; a {answer.get('page_kind') or 'skipped'} page"]
    if answer.get("fields") is not None:
        lines.append("fields:")
        for name, value in answer.get("fields", {}).items():
            selector = answer.get("selectors", {}).get(name, {})
            lines.append(f"  {name} = {json.dumps(value, ensure_ascii=False)}  ({selector.get('count', 0)} matches "
                         f"of {selector.get('xpath', '?')})")
    links = answer.get("links")
    if links:
        for kind in ("detail", "list", "ignored"):
            lines.append(f"{kind} links: {links['counts'][kind]}")
            lines += [f"  {link['url']}  <- {link['rule']}" for link in links[kind][:SHOWN_LINKS]]
    lines += [f"warning: {w}" for w in answer.get("warnings", [])]
    return "\n".join(lines) + "\n"

"""``/logs/``, ``/logs/<project>/`` and ``/logs/<project>/<spider>/`` as Scrapyd 1.6 lists its logs directory.

Scrapyd serves its ``logs_dir`` with Twisted's ``static.File`` and its own ``DirectoryLister`` (a "Last modified"
column added); ScrapydWeb's Logs page parses those rows with a regular expression, so each row here has their
layout to the line: ``<tr class="odd">`` or ``"even"``, then one ``<td>`` a line for the name (a link relative to
the listing, as Twisted writes it), the size (as Twisted's ``formatFileSize`` writes it), the time, the content type and the
encoding.  The listing is made from the jobs that have logs (their files are flat, one a job), with each job's
last change as its time.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from itertools import cycle
from typing import Iterable
from urllib.parse import quote

from spiderd.worker.jobs import Job

ROW = """<tr class="{row}">
    <td><a href="{href}">{text}</a></td>
    <td>{size}</td>
    <td>{modified}</td>
    <td>{type}</td>
    <td>{encoding}</td>
</tr>
"""
TABLE = """<h1>{header}</h1>

<table>
    <thead>
        <tr>
            <th>Filename</th>
            <th>Size</th>
            <th>Last modified</th>
            <th>Content type</th>
            <th>Content encoding</th>
        </tr>
    </thead>
    <tbody>
{rows}    </tbody>
</table>"""


def listing(jobs: Iterable[tuple[Job, int]], parts: list[str]) -> tuple[str, str] | None:
    """(title, HTML body) of the directory ``parts`` (none: ``/logs/``; the project; the project and spider) over
    ``jobs`` (each with its log's size); None: no such directory."""
    below = [(job, size) for job, size in jobs if [job.project, job.spider][: len(parts)] == parts]
    if parts and not below:
        return None
    entries: dict[str, tuple[bool, int, float]] = {}  # name -> (a directory, size, modified)
    for job, size in below:
        modified = job.end_time or job.start_time or job.created
        if len(parts) == 2:
            entries[job.id + ".log"] = (False, size, modified)
        else:
            name = (job.project, job.spider)[len(parts)]
            old = entries.get(name, (True, 0, 0.0))
            entries[name] = (True, 0, max(modified, old[2]))
    ordered = sorted(entries.items(), key=lambda e: (not e[1][0], e[0]))  # directories first, as Twisted lists
    rows = "".join(_row(name, *entry, row) for (name, entry), row in zip(ordered, cycle(("odd", "even"))))
    header = "Directory listing for /logs/" + "".join(p + "/" for p in parts)
    return header, TABLE.format(header=escape(header), rows=rows)


def _row(name: str, directory: bool, size: int, modified: float, row: str) -> str:
    when = datetime.fromtimestamp(modified).strftime("%Y-%m-%d %H:%M")
    if directory:
        return ROW.format(row=row, href=escape(quote(name, safe="") + "/"), text=escape(name) + "/", size="",
                          modified=when, type="[Directory]", encoding="")
    return ROW.format(row=row, href=escape(quote(name, safe="")), text=escape(name), size=formatted_size(size),
                      modified=when, type="[text/plain]", encoding="")


def formatted_size(size: int) -> str:
    """A size as Twisted's ``static.formatFileSize`` writes it ("512B", "12K"), without importing that module (its
    import warns of deprecated names)."""
    for unit, scale in (("G", 1024 ** 3), ("M", 1024 ** 2), ("K", 1024)):
        if size >= scale:
            return "%i%s" % (size / scale, unit)
    return "%iB" % size

"""The start check of the configured FTPS and SFTP targets: a host whose certificate or host key does not check
stops the start with one line (:class:`~spiderd.feed.errors.FeedTrustError`), instead of a file retried at run
time.  A host that does not answer now is only warned of: its files wait in the spool."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from twisted.logger import Logger

from spiderd.core.feeduri import template_target
from spiderd.core.secrets import mask_secret, redact
from spiderd.feed.errors import FeedTrustError
from spiderd.feed.transport import Abort, TransportOptions, open_session

log = Logger()

PROBE_TIMEOUT = 10.0  # seconds a host may take to answer the start check


def check_trust(templates: tuple[str, ...], options: TransportOptions, reactor: Any = None) -> None:
    """Blocking: log in to each ``ftps://`` and ``sftp://`` host of ``templates`` (feed URI templates); raises
    FeedTrustError for the first whose certificate or host key does not check (or, SFTP, is not in known_hosts)."""
    quick = replace(options, timeout=min(options.timeout, PROBE_TIMEOUT))
    for template in templates:
        target = template_target(template)
        if target.scheme not in ("ftps", "sftp"):
            continue
        try:
            session = open_session(target, quick, Abort(), reactor)
        except FeedTrustError:
            raise
        except Exception as e:
            log.warn("Feed host {target} did not answer the start check ({error}); its files wait in the spool",
                     target=redact(str(target)), error=mask_secret(redact(f"{type(e).__name__}: {e}"), target.password))
            continue
        session.quit()
        session.close()
        log.info("Feed host {target}: {what} checks", target=redact(str(target)),
                 what="TLS certificate" if target.scheme == "ftps" else "SSH host key")

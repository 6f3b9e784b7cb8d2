"""spiderctl's side of the HTTP API: the client (urllib only, no Twisted), its errors and the exit statuses."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import urllib.error
import urllib.request
from typing import Any

OK, REFUSED, USAGE, UNREACHABLE, UNAUTHORIZED = 0, 1, 2, 3, 4


class CtlError(Exception):
    """One line for stderr, and the exit status."""

    def __init__(self, message: str, status: int = REFUSED) -> None:
        super().__init__(message)
        self.status = status


class Client:
    """The API at ``base``, with a bearer token or basic credentials."""

    def __init__(self, base: str, token: str = "", user: str = "", password: str = "", timeout: float = 30.0) -> None:
        self.base = base.rstrip("/")
        self._headers: dict[str, str] = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        elif user:
            pair = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {pair}"
        self._timeout = timeout

    def open(self, method: str, path: str, body: bytes | None = None,
             content_type: str = "application/json") -> Any:
        """The open response (to read or stream); raises CtlError with the server's message."""
        headers = dict(self._headers)
        if body is not None:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.base + path, data=body, headers=headers, method=method)
        try:
            return urllib.request.urlopen(request, timeout=self._timeout)
        except urllib.error.HTTPError as e:
            raise self._refused(e) from None
        except urllib.error.URLError as e:
            raise CtlError(f"cannot reach spiderd at {self.base}: {_reason(e.reason)}", UNREACHABLE) from None
        except (OSError, http.client.HTTPException) as e:
            raise CtlError(f"cannot reach spiderd at {self.base}: {_reason(e)}", UNREACHABLE) from None

    def csrf(self) -> None:
        """Send the API's CSRF token with the next writes (needed unless the bearer token is used)."""
        if not self._headers.get("Authorization", "").startswith("Bearer "):
            self._headers["X-CSRF-Token"] = self.call("GET", "/api/csrf")["token"]

    def call(self, method: str, path: str, payload: Any = None) -> dict[str, Any]:
        """A JSON request and its JSON answer."""
        body = json.dumps(payload).encode() if payload is not None else (b"{}" if method == "POST" else None)
        with self.open(method, path, body) as response:
            return json_answer(response.read(), self.base)

    def _refused(self, error: urllib.error.HTTPError) -> CtlError:
        try:
            message = json.loads(error.read()).get("message") or error.reason
        except (ValueError, AttributeError, OSError):
            message = error.reason
        if error.code == 401:
            return CtlError(f"spiderd at {self.base} refused the credentials (401): give the api.token with --token "
                            "or SPIDERD_TOKEN (or --user and --password)", UNAUTHORIZED)
        return CtlError(f"spiderd refused the request ({error.code}): {message}", REFUSED)


def _reason(reason: Any) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (is spiderd running, with this api.port?)"
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(reason, socket.gaierror):
        return f"unknown host ({reason.strerror})"
    return str(getattr(reason, "strerror", None) or reason)


def json_answer(raw: bytes, base: str) -> dict[str, Any]:
    """The API's JSON answer, or CtlError if it is not JSON."""
    try:
        answer: dict[str, Any] = json.loads(raw)
    except ValueError:
        raise CtlError(f"{base} did not answer JSON: is it spiderd's API?") from None
    return answer

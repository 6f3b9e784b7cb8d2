"""One render child as the render pool sees it (:mod:`spiderd.engine.renderchild`): started with this interpreter,
frames out on its stdin, frames in on its stdout, the pages it holds by id.  Its process group (the child, its
Playwright driver, its browser) is ended as one."""

from __future__ import annotations

import marshal
import os
import signal
from typing import Any, Protocol

from twisted.internet.interfaces import IProcessTransport, IReactorProcess, IReactorTime
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.fetch.parsechild import spawn_module
from spiderd.fetch.parseworker import FrameDecoder, FrameError, frame

log = Logger()


class BrowserOwner(Protocol):
    """What a browser child tells its pool."""

    def browser_ready(self, child: BrowserChild) -> None:
        """The browser is up and takes pages."""

    def browser_message(self, child: BrowserChild, message: tuple[Any, ...]) -> None:
        """A page's answer or one of its sub-requests."""

    def browser_ended(self, child: BrowserChild, reason: Failure) -> None:
        """The child exited; the pages it held are the owner's to render again or fail."""


def spawn(reactor: IReactorProcess, child: BrowserChild) -> None:
    """Start ``child``'s process with this interpreter, this ``spiderd`` first on its path."""
    spawn_module(reactor, child, "spiderd.engine.renderchild")


class BrowserChild(ProcessProtocol):
    """One browser in its child process: the pages it holds (id -> the pool's job), its counts."""

    transport: IProcessTransport  # set by spawnProcess

    def __init__(self, owner: BrowserOwner, slot: int, clock: IReactorTime) -> None:
        self.owner = owner
        self.slot = slot
        self.clock = clock
        self.pages: dict[int, Any] = {}  # render id -> the pool's job
        self.ready = False
        self.retiring = False  # takes no new page; its input closes once it holds none
        self.rendered = 0  # pages given to it in all
        self.budget = 0  # pages it renders before it is replaced (the pool's max_pages, staggered at first)
        self.init: tuple[Any, ...] | None = None  # the bounds it was started with (the pool's init message)
        self.pid: int | None = None
        self.killed_because = ""
        self.killed_kind = ""  # why it was killed, in a word (the pool's restart reasons): "hung", "protocol"
        self.said = ""  # its last words (a "gone" message, or stderr)
        self._frames = FrameDecoder()

    def connectionMade(self) -> None:
        self.pid = self.transport.pid
        log.info("Render browser {slot} started (pid {pid})", slot=self.slot, pid=self.pid)

    def send(self, message: tuple[Any, ...]) -> None:
        if getattr(self, "transport", None) is not None:
            self.transport.write(frame(message))

    def close(self) -> None:
        """No more pages: it finishes those it holds, closes its browser and exits."""
        self.transport.closeStdin()

    def kill(self, because: str, kind: str = "killed") -> None:
        """SIGKILL the child and its browser (its process group); its pages go back to the pool."""
        log.warn("Killing render browser {slot} (pid {pid}): {because}", slot=self.slot, pid=self.pid,
                 because=because)
        self.killed_because = self.killed_because or because
        self.killed_kind = self.killed_kind or kind
        try:
            if self.pid is None:
                raise OSError("no process group")
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:  # already gone, or not a group leader yet: the child alone
            try:
                self.transport.signalProcess("KILL")
            except Exception:  # gone: processEnded follows
                pass

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        if childFD != 1:
            text = data.decode("utf-8", "replace").rstrip()
            if text:
                self.said = text[-300:]
                log.debug("Render browser {slot} says: {text}", slot=self.slot, text=text[:2000])
            return
        try:
            for payload in self._frames.feed(data):
                self._message(marshal.loads(payload))
        except (FrameError, ValueError, EOFError, TypeError) as e:
            self.kill(f"protocol error ({e})", "protocol")

    def _message(self, message: tuple[Any, ...]) -> None:
        if message[0] == "ready":
            self.ready = True
            self.owner.browser_ready(self)
        elif message[0] == "gone":
            self.said = str(message[1])
        else:
            self.owner.browser_message(self, message)

    def processEnded(self, reason: Failure) -> None:
        self.owner.browser_ended(self, reason)

    @property
    def why_ended(self) -> str:
        """Why it ended, in a few words."""
        return self.killed_because or self.said or "it exited"

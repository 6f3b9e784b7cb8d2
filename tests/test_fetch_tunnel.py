"""https:// through a site's proxy: a CONNECT relay on loopback in front of an https origin the test trusts."""

from __future__ import annotations

import base64
import datetime
from typing import Any
from urllib.parse import quote

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from twisted.internet import defer, reactor, ssl
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial import unittest
from twisted.web import client, server

from spiderd.config import settings as cfg
from spiderd.core import status as st
from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.fetch.tunnel import MAX_ANSWER, connect_request

from .helpers import ClockedReactor
from .test_fetch_protocol import Recorder

ORIGIN = "origin.test"  # resolved by the relay only, as a proxy resolves the origins it tunnels to


def self_signed(name: str) -> tuple[bytes, bytes]:
    """A key and a self-signed certificate for ``name`` (PEM), valid today."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


class _Back(Protocol):
    """The relay's connection to the origin: what comes from it goes back to the client."""

    def __init__(self, front: _Relay) -> None:
        self.front = front

    def dataReceived(self, data: bytes) -> None:
        self.front.transport.write(data)

    def connectionLost(self, reason: Any = None) -> None:
        self.front.transport.loseConnection()


class _Relay(Protocol):
    """A CONNECT proxy: records each request head, then relays, refuses, closes or stays silent (``mode``)."""

    def connectionMade(self) -> None:
        self.head = b""
        self.back: _Back | None = None

    def dataReceived(self, data: bytes) -> None:
        if self.back is not None:
            self.back.transport.write(data)
            return
        self.head += data
        if b"\r\n\r\n" not in self.head:
            return
        head = self.head.partition(b"\r\n\r\n")[0]
        self.factory.asked.append(head)
        self.factory.got.callback(head) if not self.factory.got.called else None
        getattr(self, "_" + self.factory.mode)(head)

    def _relay(self, head: bytes) -> None:
        if head.startswith(b"GET "):  # an absolute URI, as ProxyAgent sends http:// URLs
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nproxied")
            return
        host, _, port = head.split(b" ")[1].decode().rpartition(":")
        address = self.factory.names.get(host, host)
        endpoint = TCP4ClientEndpoint(reactor, address, int(port))
        connectProtocol(endpoint, _Back(self)).addCallback(self._connected)

    def _connected(self, back: _Back) -> None:
        self.back = back
        self.transport.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

    def _refuse(self, head: bytes) -> None:
        self.transport.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=x\r\n"
                             b"Content-Length: 6\r\n\r\ndenied")

    def _close(self, head: bytes) -> None:
        self.transport.loseConnection()

    def _escape(self, head: bytes) -> None:
        self.transport.write(b"HTTP/1.1 403 Nope\x1b[2J\x00\x7f forged\r\nContent-Length: 0\r\n\r\n")

    def _silent(self, head: bytes) -> None:
        pass

    def _chatty(self, head: bytes) -> None:
        self.transport.write(b"HTTP/1.1 200 OK\r\n" + b"X-Filler: " + b"x" * MAX_ANSWER + b"\r\n")

    def connectionLost(self, reason: Any = None) -> None:
        if not self.factory.closed.called:
            self.factory.closed.callback(None)
        if self.back is not None:
            self.back.transport.loseConnection()


class TunnelTests(unittest.TestCase):
    """A proxied site's https:// URLs go through a CONNECT tunnel, and nowhere else."""

    PASSWORD = "pa@ss w0rd"

    def setUp(self) -> None:
        self.clock = Clock()
        key, cert = self_signed(ORIGIN)
        self.trust = client.BrowserLikePolicyForHTTPS(trustRoot=ssl.Certificate.loadPEM(cert))
        self.origin = Recorder()
        site = server.Site(self.origin)
        site.noisy = False
        options = ssl.PrivateCertificate.loadPEM(key + cert).options()
        tls_port = reactor.listenSSL(0, site, options, interface="127.0.0.2")
        self.addCleanup(tls_port.stopListening)
        self.url = f"https://{ORIGIN}:{tls_port.getHost().port}"
        self.relay = Factory.forProtocol(_Relay)
        self.relay.noisy = False
        self.relay.mode, self.relay.asked, self.relay.got = "relay", [], defer.Deferred()
        self.relay.closed = defer.Deferred()  # fires when the relay's first connection is closed
        self.relay.names = {ORIGIN: "127.0.0.2"}
        port = reactor.listenTCP(0, self.relay, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.proxy = f"http://crawler:{quote(self.PASSWORD, safe='')}@127.0.0.1:{port.getHost().port}"

    def fetcher(self, **config: Any) -> Fetcher:
        sites = cfg.from_dict({"sites": [{"allowed_hosts": [ORIGIN], "proxy": self.proxy}]}).sites
        fetcher = Fetcher(ClockedReactor(reactor, self.clock), FetchConfig(sites=sites, **config), tls=self.trust)
        self.addCleanup(fetcher.close)
        return fetcher

    @defer.inlineCallbacks
    def test_a_page_through_the_tunnel(self) -> Any:
        """CONNECT with Host and Proxy-Authorization, then the page over TLS; a second fetch reuses the tunnel."""
        fetcher = self.fetcher()
        result = yield fetcher.fetch(self.url + "/page")
        self.assertEqual((result.status, result.body), (200, b"<html>ok</html>"))
        again = yield fetcher.fetch(self.url + "/next")
        self.assertEqual(again.status, 200)
        target = self.url.removeprefix("https://").encode()
        expected = b"Basic " + base64.b64encode(f"crawler:{self.PASSWORD}".encode())
        self.assertEqual(self.relay.asked, [b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target
                                            + b"\r\nProxy-Authorization: " + expected])
        self.assertEqual([path for path, _ in self.origin.seen], ["/page", "/next"])
        self.assertIsNone(self.origin.header("/page", b"proxy-authorization"))  # for the proxy alone

    @defer.inlineCallbacks
    def test_http_urls_still_go_as_absolute_uris(self) -> Any:
        """A proxied http:// URL goes through ProxyAgent (GET with the absolute URI), not a tunnel."""
        result = yield self.fetcher().fetch(f"http://{ORIGIN}/plain")
        self.assertEqual((result.status, result.body), (200, b"proxied"))
        self.assertEqual(len(self.relay.asked), 1)
        self.assertTrue(self.relay.asked[0].startswith(f"GET http://{ORIGIN}/plain HTTP/1.1\r\n".encode()))

    @defer.inlineCallbacks
    def test_a_refusal_names_the_status_and_never_the_password(self) -> Any:
        """A 407: the fetch fails naming the status; no reason or log line holds the password."""
        self.relay.mode = "refuse"
        with capturedLogs() as events:
            result = yield self.fetcher().fetch(self.url + "/page")
        self.assertEqual((result.status, result.error), (st.CONNECT_ERROR, "proxy"))
        self.assertIn("refused CONNECT: 407 Proxy Authentication Required", result.reason)
        self.assertIn("crawler:***@127.0.0.1", result.reason)
        for text in [result.reason, repr(result)] + [formatEvent(e) for e in events]:
            self.assertNotIn(self.PASSWORD, text)
            self.assertNotIn(quote(self.PASSWORD, safe=""), text)
        self.assertEqual(self.origin.seen, [])

    @defer.inlineCallbacks
    def test_a_refusal_phrase_keeps_no_control_characters(self) -> Any:
        """A proxy's reason phrase with terminal escapes and NUL: the reason names it with those characters replaced."""
        self.relay.mode = "escape"
        result = yield self.fetcher().fetch(self.url + "/page")
        self.assertEqual(result.status, st.CONNECT_ERROR)
        self.assertIn("refused CONNECT: 403 Nope?[2J?? forged", result.reason)
        self.assertNotRegex(result.reason, "[\x00-\x1f\x7f]")

    @defer.inlineCallbacks
    def test_a_proxy_that_closes(self) -> Any:
        """A proxy that closes before answering: a connect error saying so."""
        self.relay.mode = "close"
        result = yield self.fetcher().fetch(self.url + "/page")
        self.assertEqual(result.status, st.CONNECT_ERROR)
        self.assertIn("closed the connection before answering CONNECT", result.reason)

    @defer.inlineCallbacks
    def test_a_proxy_that_never_answers(self) -> Any:
        """No answer to CONNECT: the fetch fails once the connect timeout has passed on the clock, not before."""
        self.relay.mode = "silent"
        d = self.fetcher(connect_timeout=5.0, timeout=30.0).fetch(self.url + "/page")
        yield self.relay.got
        self.clock.advance(4.9)
        self.assertFalse(d.called)
        self.clock.advance(0.1)
        result = yield d
        self.assertEqual(result.status, st.TIMEOUT)
        self.assertIn("no answer from proxy http://crawler:***@127.0.0.1", result.reason)
        self.assertIn("within 5 s", result.reason)

    @defer.inlineCallbacks
    def test_the_fetch_timeout_drops_the_handshake(self) -> Any:
        """A fetch whose own timeout comes first, during the handshake: a timeout, and the proxy connection dropped."""
        self.relay.mode = "silent"
        d = self.fetcher(connect_timeout=10.0, timeout=3.0).fetch(self.url + "/page")
        yield self.relay.got
        self.clock.advance(3.0)
        result = yield d
        self.assertEqual(result.status, st.TIMEOUT)
        self.assertIn("no whole answer within 3 s", result.reason)
        yield self.relay.closed
        self.assertEqual(self.clock.getDelayedCalls(), [])  # the handshake's deadline went with it

    @defer.inlineCallbacks
    def test_an_endless_answer_is_cut(self) -> Any:
        """A proxy whose answer to CONNECT runs past MAX_ANSWER bytes of headers: refused, not buffered on."""
        self.relay.mode = "chatty"
        result = yield self.fetcher().fetch(self.url + "/page")
        self.assertEqual(result.status, st.CONNECT_ERROR)
        self.assertIn(f"more than {MAX_ANSWER} bytes", result.reason)

    @defer.inlineCallbacks
    def test_an_untrusted_origin_is_refused(self) -> Any:
        """The origin's certificate is checked as for a direct https:// fetch: without the test's trust, no page."""
        self.trust = client.BrowserLikePolicyForHTTPS()
        result = yield self.fetcher().fetch(self.url + "/page")
        self.assertLess(result.status, 0)
        self.assertEqual(self.origin.seen, [])
        self.assertEqual(len(self.relay.asked), 1)

    def test_the_connect_request(self) -> None:
        """An IPv6 origin in brackets; no Proxy-Authorization without credentials."""
        self.assertEqual(connect_request(b"::1", 8443, None),
                         b"CONNECT [::1]:8443 HTTP/1.1\r\nHost: [::1]:8443\r\n\r\n")

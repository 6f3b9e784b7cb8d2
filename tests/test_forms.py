"""A form body decoded in steps (spiderd.core.net.forms): Twisted's decode, a step at a time."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from hypothesis import given, settings
from hypothesis import strategies as s
from twisted.trial import unittest
from twisted.web.http import parse_qs

from spiderd.core.net.forms import STEP, Form, MalformedForm, decode_form, decode_multipart

# the bytes that matter to a decoder: escapes whole, cut and invalid, both separators, "+", "=", non-ASCII
_PIECES = [b"%", b"%4", b"%41", b"%e9", b"%C3%A9", b"%%", b"%zz", b"=", b"&", b";", b"+", b"4", b"1", b"a", b"F",
           b"g", b"\xc3", b" ", b"\n"]
_bodies = s.lists(s.sampled_from(_PIECES), max_size=40).map(b"".join)


def decoded(body: bytes, step: int = STEP) -> tuple[Form, int]:
    """The form and the number of steps its decode took."""
    form: Form = {}
    steps = sum(1 for _ in decode_form(body, form, step))
    return form, steps


@settings(max_examples=1500, deadline=None)
@given(_bodies, s.integers(min_value=1, max_value=8))
def test_same_as_twisted_wherever_the_steps_cut(body: bytes, step: int) -> None:
    """Any body, cut into steps of any size (an escape split across two steps too), decodes as Twisted's own
    parse_qs decodes it with blank values kept."""
    assert decoded(body, step)[0] == parse_qs(body, 1)


class DecodeFormTests(unittest.SynchronousTestCase):
    """The decode of a body the size of a big schedule.json."""

    def test_a_big_form_takes_a_step_per_step_bytes(self) -> None:
        """A form of 60,000 start URLs (3 MB, mostly escapes) is decoded as Twisted decodes it, in about one
        step per STEP bytes: none holds the reactor for the whole body."""
        urls = json.dumps([f"http://127.0.0.1:8000/item/{i}.html?q=caf\u00e9" for i in range(60_000)])
        body = urlencode([("project", "spiderd"), ("spider", "shop"), ("setting", "DISTRIBUTED_START_URLS=" + urls)])
        form, steps = decoded(body.encode())
        self.assertEqual(form, parse_qs(body.encode(), 1))
        self.assertEqual(form[b"setting"][0].decode(), "DISTRIBUTED_START_URLS=" + urls)
        self.assertGreaterEqual(steps, len(body) // STEP)

    def test_many_small_fields_take_steps_too(self) -> None:
        """A body of many short fields is not one step either (each field counts beyond its bytes)."""
        body = b"&".join(b"a%d=%d" % (i, i) for i in range(50_000))
        form, steps = decoded(body)
        self.assertEqual(form, parse_qs(body, 1))
        self.assertGreater(steps, len(body) // STEP)


def multipart(ctype: bytes, body: bytes, step: int = STEP) -> Form:
    """The fields of a multipart/form-data body, decoded ``step`` bytes at a time."""
    form: Form = {}
    for _ in decode_multipart(ctype, body, form, step):
        pass
    return form


def test_multipart_and_urlencoded_bodies_read_their_fields() -> None:
    """A multipart/form-data body gives its named parts (a repeated name twice, an unnamed part none) wherever
    its steps cut, as an urlencoded body gives its fields; a multipart body that is not one is MalformedForm."""
    ctype = b"multipart/form-data; boundary=b0"
    parts = [(b'name="setting"', b"A=1"), (b'name="setting"', b"B=2"), (b"filename=x", b"skipped"),
             (b'name="spider"', b"demo\r\nshop")]
    body = b"".join(b"--b0\r\nContent-Disposition: form-data; %s\r\n\r\n%s\r\n" % p for p in parts) + b"--b0--\r\n"
    for step in (1, 2, 3, 7, STEP):
        assert multipart(ctype, body, step) == {b"setting": [b"A=1", b"B=2"], b"spider": [b"demo\r\nshop"]}
    assert decoded(b"a=1&a=&b=2")[0] == {b"a": [b"1", b""], b"b": [b"2"]}
    try:
        multipart(ctype, b"garbage")
    except MalformedForm as e:
        assert "multipart" in str(e)
    else:
        raise AssertionError("a body that is not multipart was read")

"""URLList: a compact sequence of URLs that reads as the list it was made from."""

from __future__ import annotations

import pickle

import pytest

from spiderd.core.urllist import URLList

URLS = ["http://a.test/", "http://b.test/x?y=1", "", "http://é.test/ü"]


def test_reads_as_its_list() -> None:
    """Length, items (negative ones too), slices and iteration are those of the list it was made from."""
    urls = URLList(URLS)
    assert (len(urls), list(urls), urls[1], urls[-1], urls[1:3], urls[::2]) == (
        4, URLS, URLS[1], URLS[-1], URLS[1:3], URLS[::2])
    with pytest.raises(IndexError):
        urls[4]
    assert list(URLList()) == [] and len(URLList(iter(URLS))) == 4


def test_equal_to_the_same_strings() -> None:
    """Equal to any sequence (or URLList) of the same strings, and hashed alike when equal; not to a string."""
    urls = URLList(URLS)
    assert urls == URLS and URLS == urls and urls == tuple(URLS) and urls == URLList(URLS)
    assert urls != URLS[:3] and urls != URLList(URLS[:3]) and urls != "".join(URLS)
    assert hash(urls) == hash(URLList(tuple(URLS)))
    assert URLList(["ab", "c"]) != URLList(["a", "bc"])


def test_of_keeps_a_urllist_and_pickles() -> None:
    """``of`` gives a URLList back as it is (it never changes); a pickled one reads the same."""
    urls = URLList(URLS)
    assert URLList.of(urls) is urls and URLList.of(URLS) == urls
    assert pickle.loads(pickle.dumps(urls)) == urls
    assert repr(URLList(["http://a.test/"])) == "URLList(['http://a.test/'])"

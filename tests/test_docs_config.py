"""The configuration's documentation has one source: every key of the code is described in etc/spiderd.toml, shown
at its default there, and in the generated reference; and every TOML snippet of the docs is a valid configuration."""

from __future__ import annotations

import importlib.util
import os
import re
import tomllib
from pathlib import Path

import pytest

from spiderd.config import reference
from spiderd.config import settings as cfg
from spiderd.config.convert import HOST_KEYS
from spiderd.config.schema import SCHEMA, SITE_KEYS

ROOT = Path(__file__).resolve().parent.parent
ANNOTATED = ROOT / "etc" / "spiderd.toml"
DOCS = [ROOT / "README.md", ROOT / "bench" / "README.md",
        *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)]
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)\s*$",
                   re.M | re.S)


def test_every_key_is_described_at_its_default() -> None:
    """Each key of the schema, of a [[sites]] table and of a [fetch.hosts] table has its comment in the annotated
    file, and each value shown there is the code's default unless marked as an example."""
    assert reference.problems(reference.read(ANNOTATED.read_text())) == []


def test_a_key_without_description_is_named() -> None:
    """A key whose comment is dropped, a value that is not the default and a key the code lacks are each named."""
    text = ANNOTATED.read_text()
    text = re.sub(r"^(max_redirects = 5)\s+#.*$", r"\1", text, flags=re.M)
    text = text.replace("max_url_length = 2083 ", "max_url_length = 99 ")
    text = text.replace("[feed]\n", "[feed]\nretry_forever = true   # a key the code lacks\n")
    found = reference.problems(reference.read(text))
    assert any(p.startswith("fetch.max_redirects: no description") for p in found), found
    assert any(p.startswith("pool.max_url_length: the value shown, 99, is not the default") for p in found), found
    assert "feed.retry_forever: not a key spiderd knows" in found


def test_a_key_missing_from_the_file_is_named() -> None:
    """A key of the code that the annotated file does not show at all is named too."""
    text = re.sub(r"^linkbase_max = .*\n", "", ANNOTATED.read_text(), flags=re.M)
    assert "pool.linkbase_max: no description (a comment after its value in the annotated file)" in \
        reference.problems(reference.read(text))


def test_reference_page_has_every_key() -> None:
    """The generated page has a confval for every key, with its kind, and the default the file shows."""
    page = reference.markdown(reference.read(ANNOTATED.read_text()))
    names = set(re.findall(r"^```\{confval\} (\S+)$", page, re.M))
    expected = {f"{s}.{k}" for s, keys in SCHEMA.items() for k in keys if k != "hosts"}
    expected |= {f"sites.{k}" for k in SITE_KEYS} | {f"fetch.hosts.{k}" for k in HOST_KEYS}
    assert names == expected
    assert '```{confval} fetch.timeout\n---\ntype: "number \\\\> 0"\ndefault: "`30`"\n---\nWhole request' in page
    assert '```{confval} store.compression_preset\n---\ntype: "\\"fast\\" or an integer 0..9"\ndefault: "`\\"fast\\"`"' in page


def test_kinds_are_all_told() -> None:
    """Every kind the schema uses has its phrase in the reference."""
    assert {kind for keys in SCHEMA.values() for kind in keys.values()} <= set(reference.KINDS)
    assert set(SITE_KEYS) == set(reference.SITE_KINDS) and set(HOST_KEYS) == set(reference.HOST_KINDS)


def toml_snippets() -> list[tuple[str, str]]:
    """Every ```toml block of the README, bench/README.md and docs/, with where it is."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group("info").split() and match.group("info").split()[0] in ("toml", "{code-block}"):
                if match.group("info").split()[0] == "{code-block}" and "toml" not in match.group("info"):
                    continue
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{path.relative_to(ROOT)}:{line}", match.group("body")))
    return found


SNIPPETS = toml_snippets()


@pytest.mark.parametrize("body", [body for _, body in SNIPPETS], ids=[where for where, _ in SNIPPETS])
def test_toml_snippet_is_a_valid_configuration(body: str) -> None:
    """Each TOML snippet of the docs parses and passes spiderd's validation as a whole configuration (the keys
    it leaves out at their defaults)."""
    raw = tomllib.loads(body)
    asks_render = any(site.get("render", "never") != "never" for site in raw.get("sites", []))
    if asks_render and not (importlib.util.find_spec("playwright") and os.access("/usr/bin/chromium", os.X_OK)):
        if os.environ.get("SPIDERD_REQUIRE_SERVICES") == "1":
            pytest.fail("the snippet renders: playwright and /usr/bin/chromium are needed")
        pytest.skip("the snippet renders: playwright or /usr/bin/chromium missing")
    cfg.from_dict(raw, "snippet")


def test_snippets_are_found() -> None:
    """The snippet scan sees the docs' TOML blocks (a change of fence style would otherwise test nothing)."""
    assert len(SNIPPETS) >= 7, SNIPPETS

"""The configuration: the annotated example loads, and every kind of bad value is one clear line."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from spiderd.config import settings as cfg
from spiderd.config.schema import SCHEMA

ROOT = Path(__file__).resolve().parent.parent


def test_example_config_loads() -> None:
    """etc/spiderd.toml, the annotated example, is valid and says what it says."""
    settings = cfg.load(str(ROOT / "etc" / "spiderd.toml"))
    assert settings.fetch.concurrency == 64 and settings.fetch.robots is True and settings.fetch.keepalive_timeout == 10
    assert settings.sites[0].detail_urls == (r"/item/\d+\.html$",)
    assert [f.name for f in settings.sites[0].fields] == ["title", "price", "tags"]
    assert settings.sites[0].fields[2].all is True
    assert (settings.api.bind, settings.api.port, settings.api.token) == ("127.0.0.1", 6810, "")
    import tomllib

    raw = tomllib.loads((ROOT / "etc" / "spiderd.toml").read_text())
    assert set(raw["sitemaps"]) == set(SCHEMA["sitemaps"])  # every [sitemaps] key is shown, at its default
    assert (settings.sitemaps.max_files, settings.sitemaps.refresh, settings.sitemaps.paths) == (100, 86400.0, ())


def test_defaults_without_file() -> None:
    """An empty configuration is valid: every key has a default."""
    settings = cfg.from_dict({})
    assert settings.store.url.startswith("sqlite:///") and settings.pool.backend == "leveldb"


def test_api_defaults_and_credentials() -> None:
    """[api]: 127.0.0.1:6810 without credentials; another address with a token or basic auth."""
    settings = cfg.from_dict({})
    assert (settings.api.bind, settings.api.port, settings.api.token, settings.api.username) == ("127.0.0.1", 6810, "", "")
    assert cfg.from_dict({"api": {"bind": "0.0.0.0", "token": "t0k"}}).api.token == "t0k"
    assert cfg.from_dict({"api": {"bind": "::", "username": "ops", "password": "pw"}}).api.username == "ops"
    assert cfg.from_dict({"api": {"bind": "localhost", "port": 0}}).api.port == 0
    assert "t0k" not in repr(cfg.from_dict({"api": {"token": "t0k"}}))


def test_listen_endpoints() -> None:
    """Each API listens on ``listen`` or on bind and port, with ``backlog`` unless the endpoint names one (a
    systemd socket has its unit's); a UNIX socket, loopback or credentials pass the exposure rule."""
    from spiderd.config.listen import listen_endpoint

    api = cfg.from_dict({}).api
    assert (api.listen, api.backlog, api.header_timeout, api.idle_timeout) == ("", 1024, 30.0, 60.0)
    assert listen_endpoint(api.listen, api.bind, api.port, api.backlog) == "tcp:6810:interface=127.0.0.1:backlog=1024"
    assert listen_endpoint("", "::1", 0, 50) == "tcp:0:interface=\\:\\:1:backlog=50"
    assert listen_endpoint("", "", 6810, 1024) == "tcp:6810:backlog=1024"
    assert listen_endpoint("unix:/run/s.sock:mode=660", "x", 1, 300) == "unix:/run/s.sock:mode=660:backlog=300"
    assert listen_endpoint("tcp:1:backlog=7", "x", 1, 300) == "tcp:1:backlog=7"
    assert listen_endpoint("systemd:domain=INET:index=0", "x", 1, 300) == "systemd:domain=INET:index=0"
    for listen in ("unix:/run/spiderd/api.sock", "systemd:domain=UNIX:name=api", "tcp:0:interface=127.0.0.1",
                   "tcp6:0:interface=\\:\\:1"):
        assert cfg.from_dict({"api": {"listen": listen}}).api.listen == listen
    for listen in ("tcp:6810", "systemd:domain=INET6:index=0"):
        assert cfg.from_dict({"api": {"listen": listen, "token": "t0k"}}).api.listen == listen
        assert cfg.from_dict({"spiderd": {"role": "worker"}, "worker": {"listen": listen, "username": "u",
                                                                         "password": "p"}}).worker.listen == listen
    worker = cfg.from_dict({"spiderd": {"role": "worker"}, "worker": {"listen": "unix:/run/w.sock"}}).worker
    assert worker.listen == "unix:/run/w.sock"  # no "local" target in the worker role
    frontier = {"spiderd": {"role": "frontier"}, "batch": {"targets": ["10.0.0.2:6800"]}, "worker": {"bind": "0.0.0.0"}}
    assert cfg.from_dict(frontier).worker.bind == "0.0.0.0"  # no worker runs here


def test_adaptive_politeness_settings() -> None:
    """Adaptive politeness is off by default; a host's table takes its own keys and [fetch]'s for the others."""
    from spiderd.core.rules import AdaptiveDelay

    assert cfg.from_dict({}).fetch.adaptive == AdaptiveDelay(0.0, 0.0, 30.0)
    assert not cfg.from_dict({}).fetch.adaptive.on
    settings = cfg.from_dict({"fetch": {"delay_factor": 3, "min_delay": 1, "max_delay": 20,
                                        "hosts": {"A.example": {"delay_factor": 0.5, "max_delay": 4}}}})
    assert settings.fetch.adaptive == AdaptiveDelay(3.0, 1.0, 20.0)
    assert settings.fetch.hosts["a.example"].adaptive(settings.fetch.adaptive) == AdaptiveDelay(0.5, 1.0, 4.0)
    rule = settings.fetch.adaptive
    assert (rule.wait(0.1), rule.wait(2.0), rule.wait(60.0)) == (1.0, 6.0, 20.0)


def test_politeness_by_host_or_address() -> None:
    """[fetch] politeness: "host" by default (and in the example), "ip" on asking; anything else is refused."""
    assert cfg.from_dict({}).fetch.politeness == "host"
    assert cfg.load(str(ROOT / "etc" / "spiderd.toml")).fetch.politeness == "host"
    assert cfg.from_dict({"fetch": {"politeness": "ip"}}).fetch.politeness == "ip"
    with pytest.raises(cfg.ConfigError, match="fetch.politeness"):
        cfg.from_dict({"fetch": {"politeness": "domain"}})


def test_conditional_get_on_by_default() -> None:
    """[fetch] conditional_get: on unless turned off; it reaches the pool's options."""
    from spiderd.frontier.pool.service import pool_options

    assert cfg.from_dict({}).fetch.conditional_get is True
    assert cfg.load(str(ROOT / "etc" / "spiderd.toml")).fetch.conditional_get is True
    off = cfg.from_dict({"fetch": {"conditional_get": False}})
    assert off.fetch.conditional_get is False and pool_options(off.pool, off.fetch).conditional_get is False


def test_sitemap_settings() -> None:
    """[sitemaps]: robots.txt's Sitemap: lines read, no path guessed, the protocol's limits, a daily refresh and
    lastmod on, by default; each can be changed."""
    settings = cfg.from_dict({})
    assert (settings.sitemaps.from_robots, settings.sitemaps.paths, settings.sitemaps.lastmod) == (True, (), True)
    assert (settings.sitemaps.max_urls, settings.sitemaps.max_size) == (50_000, 52_428_800)
    assert (settings.sitemaps.max_files, settings.sitemaps.refresh) == (100, 86400.0)
    changed = cfg.from_dict({"sitemaps": {
        "from_robots": False, "paths": ["/sitemap.xml", "/news/sitemap.xml.gz?x=1", "/sitemap.xml"], "max_urls": 10,
        "max_size": 4096, "max_files": 3, "refresh": 0, "lastmod": False}})
    assert (changed.sitemaps.from_robots, changed.sitemaps.lastmod, changed.sitemaps.refresh) == (False, False, 0.0)
    assert changed.sitemaps.paths == ("/sitemap.xml", "/news/sitemap.xml.gz?x=1")
    assert (changed.sitemaps.max_urls, changed.sitemaps.max_size, changed.sitemaps.max_files) == (10, 4096, 3)


def test_site_headers() -> None:
    """[[sites]] headers: name = value pairs, kept in order; none by default."""
    assert cfg.from_dict({"sites": [{"allowed_hosts": ["a"]}]}).sites[0].headers == ()
    site = cfg.from_dict({"sites": [{"allowed_hosts": ["a"], "headers": {"X-Api-Key": "k", "Accept-Language": "de"}}]}).sites[0]
    assert site.headers == (("X-Api-Key", "k"), ("Accept-Language", "de"))


@pytest.mark.parametrize(
    "headers, key, words",
    [
        (["X-A: 1"], "sites[0].headers", "expected a table"),
        ({"Connection": "close"}, "sites[0].headers.Connection", "hop-by-hop"),
        ({"transfer-encoding": "chunked"}, "sites[0].headers.transfer-encoding", "hop-by-hop"),
        ({"Proxy-Authorization": "Basic x"}, "sites[0].headers.Proxy-Authorization", "hop-by-hop"),
        ({"Host": "other.example"}, "sites[0].headers.Host", "may not set"),
        ({"Content-Length": "3"}, "sites[0].headers.Content-Length", "may not set"),
        ({"User-Agent": "x"}, "sites[0].headers.User-Agent", "fetch.user_agent"),
        ({"Accept-Encoding": "zstd"}, "sites[0].headers.Accept-Encoding", "set by the fetcher"),
        ({"Bad Name": "x"}, "sites[0].headers.Bad Name", "not a valid header name"),
        ({"X-A": 1}, "sites[0].headers.X-A", "expected a string"),
        ({"X-A": "a\r\nX-B: b"}, "sites[0].headers.X-A", "single line"),
        ({"X-A": "\u20ac"}, "sites[0].headers.X-A", "Latin-1"),
        ({"X-A": "1", "x-a": "2"}, "sites[0].headers", "named twice"),
    ],
)
def test_bad_site_headers(headers: Any, key: str, words: str) -> None:
    """A forbidden, malformed or repeated header is one line naming the site's key."""
    with pytest.raises(cfg.ConfigError) as info:
        cfg.from_dict({"sites": [{"allowed_hosts": ["a"], "headers": headers}]}, "etc/bad.toml")
    message = str(info.value)
    assert message.startswith(f"etc/bad.toml: {key}"), message
    assert words in message and "\n" not in message


@pytest.mark.parametrize(
    "proxy, words",
    [
        (8080, "expected a string"),
        ("https://u:hunter2@proxy.example:8443", "expected http://"),
        ("http://u:hunter2@proxy.example", "a port is needed"),
        ("http://u:hunter2@proxy.example:0", "a port is needed"),
        ("http://u:hunter2@proxy.example:99999", "expected http://"),
        ("http://u:hunter2@proxy.example:3128/path", "no path"),
    ],
)
def test_bad_site_proxy(proxy: Any, words: str) -> None:
    """[[sites]] proxy: http://[USER:PASS@]HOST:PORT or ""; an error never shows the password."""
    with pytest.raises(cfg.ConfigError) as info:
        cfg.from_dict({"sites": [{"allowed_hosts": ["a"], "proxy": proxy}]}, "etc/bad.toml")
    message = str(info.value)
    assert message.startswith("etc/bad.toml: sites[0].proxy: ") and words in message, message
    assert "hunter2" not in message


def test_site_proxy() -> None:
    """A proxy with or without credentials; none by default; never in a repr."""
    assert cfg.from_dict({"sites": [{"allowed_hosts": ["a"]}]}).sites[0].proxy == ""
    site = cfg.from_dict({"sites": [{"allowed_hosts": ["a"], "proxy": "http://u:hunter2@10.0.0.1:3128"}]}).sites[0]
    assert site.proxy == "http://u:hunter2@10.0.0.1:3128" and "hunter2" not in repr(site)
    assert cfg.from_dict({"sites": [{"allowed_hosts": ["a"], "proxy": "http://proxy.example:8080/"}]}).sites[0].proxy


def test_site_cookies() -> None:
    """[[sites]] cookies: off by default, a boolean."""
    assert cfg.from_dict({"sites": [{"allowed_hosts": ["a"]}]}).sites[0].cookies is False
    assert cfg.from_dict({"sites": [{"allowed_hosts": ["a"], "cookies": True}]}).sites[0].cookies is True
    with pytest.raises(cfg.ConfigError, match=r"^<config>: sites\[0\]\.cookies: expected true or false"):
        cfg.from_dict({"sites": [{"allowed_hosts": ["a"], "cookies": "yes"}]})


def test_skip_duplicate_content_off_by_default() -> None:
    """[items] skip_duplicate_content: off unless turned on (etc/spiderd.toml leaves it off); tests/test_duplicate_content
    turns it on in a node's crawl."""
    assert cfg.from_dict({}).items.skip_duplicate_content is False
    assert cfg.load(str(ROOT / "etc" / "spiderd.toml")).items.skip_duplicate_content is False
    assert cfg.from_dict({"items": {"skip_duplicate_content": True}}).items.skip_duplicate_content is True


def test_overrides() -> None:
    """section.key overrides (from the command line) win over the file."""
    settings = cfg.from_dict({"spiderd": {"role": "all"}}, overrides={"spiderd.role": "worker"})
    assert settings.spiderd.role == "worker"


@pytest.mark.parametrize(
    "raw, key, words",
    [
        ({"fetch": {"timeout": "ten"}}, "fetch.timeout", "expected a number"),
        ({"fetch": {"concurrency": 0}}, "fetch.concurrency", "1 or more"),
        ({"fetch": {"concurrency": 2.5}}, "fetch.concurrency", "expected an integer"),
        ({"fetch": {"robots": "yes"}}, "fetch.robots", "true or false"),
        ({"fetch": {"conditional_get": 1}}, "fetch.conditional_get", "true or false"),
        ({"items": {"skip_duplicate_content": "yes"}}, "items.skip_duplicate_content", "true or false"),
        ({"fetch": {"per_host_delay": -1}}, "fetch.per_host_delay", "0 or more"),
        ({"pool": {"hub_refresh_span": float("inf")}}, "pool.hub_refresh_span", "finite number"),
        ({"pool": {"pending_threshold": float("nan")}}, "pool.pending_threshold", "finite number"),
        ({"pool": {"pending_threshold": 1e20}}, "pool.pending_threshold", "at most"),
        ({"fetch": {"keepalive_timeout": 0}}, "fetch.keepalive_timeout", "greater than 0"),
        ({"pool": {"hub_percent": 0}}, "pool.hub_percent", "1..100"),
        ({"pool": {"hub_percent": 101}}, "pool.hub_percent", "1..100"),
        ({"fetch": {"user_agent": "a\nb"}}, "fetch.user_agent", "single line"),
        ({"fetch": {"source_addresses": ["300.1.1.1"]}}, "fetch.source_addresses", "does not appear"),
        ({"fetch": {"hosts": {"a.example": {"speed": 1}}}}, "fetch.hosts", "unknown key"),
        ({"fetch": {"tiemout": 3}}, "fetch.tiemout", "unknown key"),
        ({"fetch": {"delay_factor": -1}}, "fetch.delay_factor", "0 or more"),
        ({"fetch": {"delay_factor": 1e6}}, "fetch.delay_factor", "0 (off) to 1000"),
        ({"fetch": {"delay_factor": float("nan")}}, "fetch.delay_factor", "finite number"),
        ({"fetch": {"max_delay": float("inf")}}, "fetch.max_delay", "finite number"),
        ({"fetch": {"min_delay": -0.5}}, "fetch.min_delay", "0 or more"),
        ({"fetch": {"min_delay": 40}}, "fetch.min_delay", "must not exceed max_delay (40 > 30)"),
        ({"fetch": {"hosts": {"a.example": {"delay_factor": "x"}}}}, "fetch.hosts", "'a.example': delay_factor"),
        ({"fetch": {"hosts": {"a.example": {"max_delay": -1}}}}, "fetch.hosts", "'a.example': max_delay"),
        ({"fetch": {"min_delay": 5, "hosts": {"a.example": {"max_delay": 2}}}}, 'fetch.hosts."a.example".min_delay',
         "must not exceed max_delay"),
        ({"sitemaps": {"paths": ["sitemap.xml"]}}, "sitemaps.paths", "expected paths such as '/sitemap.xml'"),
        ({"sitemaps": {"paths": ["//other.example/s.xml"]}}, "sitemaps.paths", "expected paths"),
        ({"sitemaps": {"paths": ["/a b.xml"]}}, "sitemaps.paths", "expected paths"),
        ({"sitemaps": {"paths": "/sitemap.xml"}}, "sitemaps.paths", "list of strings"),
        ({"sitemaps": {"max_urls": 50_001}}, "sitemaps.max_urls", "1..50000 (the sitemap protocol's limit"),
        ({"sitemaps": {"max_urls": 0}}, "sitemaps.max_urls", "1..50000"),
        ({"sitemaps": {"max_size": 52_428_801}}, "sitemaps.max_size", "1..52428800"),
        ({"sitemaps": {"max_size": 1.5}}, "sitemaps.max_size", "expected an integer"),
        ({"sitemaps": {"max_files": 0}}, "sitemaps.max_files", "1 or more"),
        ({"sitemaps": {"refresh": -1}}, "sitemaps.refresh", "0 or more"),
        ({"sitemaps": {"lastmod": "yes"}}, "sitemaps.lastmod", "true or false"),
        ({"sitemaps": {"from_robot": True}}, "sitemaps.from_robot", "unknown key"),
        ({"fetchh": {}}, "fetchh", "unknown section"),
        ({"spiderd": {"role": "boss"}}, "spiderd.role", "must be one of"),
        ({"pool": {"seeds": ["ftp://example.com/"]}}, "pool.seeds", "bad URL"),
        ({"pool": {"seeds": "http://example.com/"}}, "pool.seeds", "list of strings"),
        ({"pool": {"pending_threshold": 10}}, "pool.pending_threshold", "longer than fetch.timeout"),
        ({"store": {"url": "postgres://x"}}, "store.url", "expected sqlite"),
        ({"store": {"compression_preset": 12}}, "store.compression_preset", "0..9"),
        ({"parse": {"workers": 100}}, "parse.workers", "-1"),
        ({"sites": {"name": "x"}}, "sites", "array of tables"),
        ({"sites": [{"name": "x"}]}, "sites[0].allowed_hosts", "at least one host"),
        ({"sites": [{"allowed_hosts": ["a"], "list_urls": ["(unclosed"]}]}, "sites[0].list_urls", "bad regular expression"),
        ({"sites": [{"allowed_hosts": ["a"], "fields": {"t": "//h1["}}]}, "sites[0].fields.t", "bad XPath"),
        ({"sites": [{"allowed_hosts": ["a"], "fields": {"t": "count("}}]}, "sites[0].fields.t", "bad XPath"),
        ({"sites": [{"allowed_hosts": ["a"], "fields": {"t": "//x:a"}}]}, "sites[0].fields.t", "namespace prefix"),
        ({"sites": [{"allowed_hosts": ["a"], "fields": {"t": "nofunc(//a)"}}]}, "sites[0].fields.t", "Unregistered"),
        ({"sites": [{"allowed_hosts": ["a"], "fields": {"t": "$price"}}]}, "sites[0].fields.t", "Undefined variable"),
        ({"sites": [{"allowed_hosts": ["a"], "fields": {"t": "css:h1[[["}}]}, "sites[0].fields.t", "bad CSS"),
        ({"sites": [{"allowed_hosts": ["a"], "fields": {"t": {"xpath": "//a", "css": "a"}}}]}, "sites[0].fields.t", "expected"),
        ({"sites": [{"allowed_hosts": ["a"], "colour": 1}]}, "sites[0].colour", "unknown key"),
        ({"api": {"bind": "0.0.0.0"}}, "api.bind", "not a loopback address"),
        ({"api": {"bind": "192.0.2.1", "username": "ops"}}, "api.username, api.password", "set both"),
        ({"api": {"username": "a:b", "password": "x"}}, "api.username", "must not contain ':'"),
        ({"api": {"port": 70000}}, "api.port", "0..65535"),
        ({"api": {"port": "6810"}}, "api.port", "expected an integer"),
        ({"api": {"token": "two words"}}, "api.token", "printable ASCII"),
        ({"api": {"tokne": "x"}}, "api.tokne", "unknown key"),
        ({"api": {"listen": "tcp:6810"}}, "api.listen", "'tcp:6810' is not a loopback address"),
        ({"api": {"listen": "tcp6:6810:interface=\\:\\:"}}, "api.listen", "not a loopback address"),
        ({"api": {"listen": "systemd:domain=INET:index=0"}}, "api.listen", "a systemd socket whose address"),
        ({"api": {"listen": "unix:/run/a.sock", "port": 6811}}, "api.listen", "set it or api.port, not both"),
        ({"api": {"listen": "http:80"}}, "api.listen", "expected tcp:PORT:interface=ADDRESS"),
        ({"api": {"listen": "tcp:70000:interface=127.0.0.1"}}, "api.listen", "the port must be a number in 0..65535"),
        ({"api": {"listen": "tcp:6810:interface=127.0.0.1:colour=red"}}, "api.listen", "unknown option 'colour'"),
        ({"api": {"listen": "tcp:6810:backlog=0:interface=127.0.0.1"}}, "api.listen", "backlog must be a number"),
        ({"api": {"listen": "tcp6:6810:interface=127.0.0.1"}}, "api.listen", "a tcp6 interface is an IPv6 address"),
        ({"api": {"listen": "unix:"}}, "api.listen", "expected unix:PATH"),
        ({"api": {"listen": "unix:/a.sock:mode=888"}}, "api.listen", "mode must be octal"),
        ({"api": {"listen": "systemd:domain=INET"}}, "api.listen", "index=N or by name=NAME"),
        ({"api": {"listen": "systemd:domain=AX25:index=0"}}, "api.listen", "domain must be one of INET, INET6, UNIX"),
        ({"api": {"listen": "tcp:1\\"}}, "api.listen", "lone backslash"),
        ({"api": {"backlog": 0}}, "api.backlog", "1..65535"),
        ({"api": {"header_timeout": 0}}, "api.header_timeout", "greater than 0"),
        ({"api": {"idle_timeout": "1m"}}, "api.idle_timeout", "expected a number"),
        ({"worker": {"listen": "tcp:6800"}}, "worker.listen", "worker.username and worker.password"),
        ({"worker": {"listen": "unix:/run/w.sock"}}, "worker.listen", "the \"local\" batch target sends batches"),
        ({"worker": {"backlog": 70000}}, "worker.backlog", "1..65535"),
    ],
)
def test_bad_values_name_file_and_key(raw: dict[str, Any], key: str, words: str) -> None:
    """Each bad value raises one line that names the file and the key."""
    with pytest.raises(cfg.ConfigError) as info:
        cfg.from_dict(raw, "etc/bad.toml")
    message = str(info.value)
    assert message.startswith(f"etc/bad.toml: {key}"), message
    assert words in message and "\n" not in message


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    """A file that is not TOML, or not there, is a ConfigError naming the file."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[fetch\ntimeout = 3")
    with pytest.raises(cfg.ConfigError, match="bad.toml: not valid TOML"):
        cfg.load(str(bad))
    with pytest.raises(cfg.ConfigError, match="cannot read"):
        cfg.load(str(tmp_path / "missing.toml"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_data_dir_as_user(tmp_path: Path) -> None:
    """A data directory that cannot be written is a ConfigError naming spiderd.data_dir."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(cfg.ConfigError, match="spiderd.data_dir"):
        cfg.check_data_dir(cfg.from_dict({"spiderd": {"data_dir": str(locked / "data")}}, "x.toml"))


def test_unwritable_data_dir(tmp_path: Path) -> None:
    """A data directory under a regular file cannot be created: a ConfigError naming spiderd.data_dir."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(cfg.ConfigError, match="x.toml: spiderd.data_dir: .* is not writable"):
        cfg.check_data_dir(cfg.from_dict({"spiderd": {"data_dir": str(blocker / "data")}}, "x.toml"))


def test_recrawl_detail_on_the_deployed_path() -> None:
    """Seed 004's mod_detail where detail pages go to workers in batches (the default target, "local", and
    remote ones): accepted; the recrawled pages go out in batches too (issue 34)."""
    for targets in (["local"], ["10.0.0.2:6800"]):
        settings = cfg.from_dict({"batch": {"targets": targets},
                                  "sites": [{"allowed_hosts": ["a.example"], "recrawl_detail": 86400}]}, "x.toml")
        assert settings.sites[0].recrawl_detail == 86400.0


@pytest.mark.parametrize(
    "raw, key, words",
    [
        ({"pool": {"seed_cron": "0 10 1 ? * ?"}}, "pool.seed_cron", "not both"),
        ({"pool": {"seed_cron": "every day"}}, "pool.seed_cron", "6-7 (Quartz"),
        ({"pool": {"seed_cron": 5}}, "pool.seed_cron", "expected a string"),
        ({"pool": {"recrawl_list_ratio": 1.5}}, "pool.recrawl_list_ratio", "between 0 and 1"),
        ({"pool": {"recrawl_list_ratio": 0.7, "recrawl_detail_ratio": 0.6}}, "pool.recrawl_detail_ratio",
         "must not exceed 1"),
        ({"pool": {"list_ratio": 1.5}}, "pool.list_ratio", "between 0 and 1"),
        ({"pool": {"list_ratio": 0.5, "detail_ratio": 0.6}}, "pool.detail_ratio", "must not exceed 1"),
        ({"pool": {"recrawl_batch": 0}}, "pool.recrawl_batch", "1 or more"),
        ({"pool": {"recrawl_every": 0}}, "pool.recrawl_every", "greater than 0"),
        ({"pool": {"linkbase": "yes"}}, "pool.linkbase", "true or false"),
        ({"pool": {"linkbase_max": -1}}, "pool.linkbase_max", "0 or more"),
        ({"pool": {"redis_namespace": 1}}, "pool.redis_namespace", "expected a string"),
        ({"pool": {"redis_seen_bucket_bits": 30}}, "pool.redis_seen_bucket_bits", "14..24"),
        ({"store": {"url": ["mysql://u@h/a", "sqlite:///x"]}}, "store.url", "mysql:// URLs"),
        ({"store": {"url": ["mysql://u@h/a", "mysql://u@h/a"]}}, "store.url", "listed twice"),
        ({"store": {"url": []}}, "store.url", "at least one"),
        ({"store": {"url": "mysql://u:p@127.0.0.1:99999/db"}}, "store.url", "must be a number in 1..65535"),
        ({"store": {"url": ["mysql://u:p@h:x/a"]}}, "store.url", "must be a number in 1..65535"),
        ({"pool": {"redis_url": "redis://h:70000/0"}}, "pool.redis_url", "must be a number in 1..65535"),
        ({"batch": {"targets": ["h:0"]}}, "batch.targets", "must be a number in 1..65535"),
        ({"sites": [{"allowed_hosts": ["a"], "recrawl_list": -1}]}, "sites[0].recrawl_list", "0 or more"),
        ({"sites": [{"allowed_hosts": ["a"], "recrawl_detail": "1h"}]}, "sites[0].recrawl_detail", "a number"),
        ({"pool": {"max_hops": -1}}, "pool.max_hops", "must be 0..255"),
        ({"pool": {"max_hops": 256}}, "pool.max_hops", "0 = no limit"),
        ({"pool": {"max_hops": "3"}}, "pool.max_hops", "an integer"),
        ({"pool": {"max_hops": 2.5}}, "pool.max_hops", "an integer"),
        ({"sites": [{"allowed_hosts": ["a"], "max_hops": 1000}]}, "sites[0].max_hops", "must be 0..255"),
    ],
)
def test_bad_cluster_values(raw: dict[str, Any], key: str, words: str) -> None:
    """The seed timer, recrawl, linkbase, namespace and shard keys: one line naming file and key."""
    with pytest.raises(cfg.ConfigError) as info:
        cfg.from_dict(raw, "etc/bad.toml")
    message = str(info.value)
    assert message.startswith(f"etc/bad.toml: {key}: "), message
    assert words in message and "\n" not in message


def test_cluster_values() -> None:
    """Shards are a tuple of URLs (one URL stays a string); the seed-002 cron and the recrawl keys load."""
    settings = cfg.from_dict({
        "pool": {"seed_cron": "0 10 1 * * ?", "recrawl_detail_ratio": 0.3, "linkbase": True, "redis_namespace": "t:",
                 "list_ratio": 0.25, "detail_ratio": 0.75},
        "store": {"url": ["mysql://u@h/a", "mysql://u@h/b"]},
        "sites": [{"allowed_hosts": ["a.example"], "recrawl_list": 3600}],
    })
    assert settings.store.url == ("mysql://u@h/a", "mysql://u@h/b")
    assert (settings.pool.seed_cron, settings.pool.recrawl_detail_ratio, settings.pool.linkbase) == ("0 10 1 * * ?", 0.3, True)
    assert (settings.sites[0].recrawl_list, settings.sites[0].recrawl_detail) == (3600.0, 0.0)
    assert (settings.pool.list_ratio, settings.pool.detail_ratio) == (0.25, 0.75)
    assert cfg.from_dict({}).store.url == "sqlite:///pages.sqlite3"


def test_max_hops() -> None:
    """[pool] max_hops and [[sites]] max_hops load (0, no limit, by default) and reach the pool's options: the
    sites' limits by the registered domains of their allowed hosts, the lower one for a domain of two sites."""
    from spiderd.frontier.pool.service import pool_options

    assert (cfg.from_dict({}).pool.max_hops, cfg.from_dict({"sites": [{"allowed_hosts": ["a"]}]}).sites[0].max_hops) == (0, 0)
    settings = cfg.from_dict({"pool": {"max_hops": 5}, "sites": [
        {"name": "one", "allowed_hosts": ["www.a.example", "b.example"], "max_hops": 3},
        {"name": "two", "allowed_hosts": ["shop.a.example"], "max_hops": 2},
        {"name": "three", "allowed_hosts": ["c.example"]},
    ]})
    assert (settings.pool.max_hops, [site.max_hops for site in settings.sites]) == (5, [3, 2, 0])
    options = pool_options(settings.pool, settings.fetch, settings.sites)
    assert (options.config.max_hops, options.site_hops) == (5, {"a.example": 2, "b.example": 3})


def _wrong_value(kind: str) -> object:
    """A value of the wrong type for a converter kind: a table where a scalar or list belongs, else a table."""
    return {"wrong": True} if kind != "hosts" else ["not", "a", "table"]


def _every_key() -> list[tuple[str, str, str]]:
    return [(section, key, kind) for section, keys in SCHEMA.items() for key, kind in keys.items()]


@pytest.mark.parametrize("section, key, kind", _every_key(), ids=[f"{s}.{k}" for s, k, _ in _every_key()])
def test_every_key_refuses_a_wrong_value(section: str, key: str, kind: str) -> None:
    """Every key of every section, given a value of the wrong type, is one line naming the file and that key."""
    with pytest.raises(cfg.ConfigError) as info:
        cfg.from_dict({section: {key: _wrong_value(kind)}}, "etc/bad.toml")
    message = str(info.value)
    assert message.startswith(f"etc/bad.toml: {section}.{key}"), message
    assert "\n" not in message


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"store": {"url": "mysq://spider:hunter2@db/pages"}}, "store.url"),
        ({"store": {"url": ["mysql://spider:hunter2@db/a", "sqlite:///x"]}}, "store.url"),
        ({"batch": {"targets": ["http://u:hunter2@h:80/x"]}}, "batch.targets"),
        ({"pool": {"redis_url": "rediss://:hunter2@h/x/y"}}, "pool.redis_url"),
        ({"batch": {"feed_uri": "ftp://u:hunter2@h/%(nope)s.jl"}}, "batch.feed_uri"),
        ({"worker": {"feed_template": "ftp://u:hunter2@h/../%(batch)s.jl"}}, "worker.feed_template"),
    ],
)
def test_config_errors_never_show_passwords(raw: dict[str, Any], key: str) -> None:
    """A bad URL with a password in it is refused with the password replaced by ***."""
    with pytest.raises(cfg.ConfigError) as info:
        cfg.from_dict(raw, "etc/bad.toml")
    message = str(info.value)
    assert message.startswith(f"etc/bad.toml: {key}: ") and "hunter2" not in message, message


@pytest.mark.parametrize(
    "value, words",
    [
        ("http://spark/%(batch)s.jl", "expected ftp://"),
        ("file:///feeds/%(shard)s.jl", "needs the parameter 'shard'"),
        ("file:///feeds/../etc/%(batch)s", "'..'"),
        ("ftp://h/feeds/50%_%(batch)s.jl", "literal %"),
    ],
)
def test_feed_templates_checked_at_load(value: str, words: str) -> None:
    """batch.feed_uri and worker.feed_template must render with batch, name and time, to file:// or ftp://."""
    for section, key in (("batch", "feed_uri"), ("worker", "feed_template")):
        with pytest.raises(cfg.ConfigError, match=f"etc/bad.toml: {section}.{key}: .*{re.escape(words)}"):
            cfg.from_dict({section: {key: value}}, "etc/bad.toml")
    ok = "ftp://u:pw@spark/in/%(batch)s_%(name)s_%(time)s.jl"
    assert cfg.from_dict({"batch": {"feed_uri": ok}, "worker": {"feed_template": ok}}).batch.feed_uri == ok


def test_worker_feed_dirs() -> None:
    """worker.feed_dirs: absolute directories, normalised; a relative one is refused."""
    settings = cfg.from_dict({"worker": {"feed_dirs": ["/srv/feeds/", "/data//out"]}})
    assert settings.worker.feed_dirs == ("/srv/feeds", "/data/out")
    with pytest.raises(cfg.ConfigError, match="worker.feed_dirs: expected absolute directories"):
        cfg.from_dict({"worker": {"feed_dirs": ["feeds"]}}, "x.toml")


def test_redis_cluster_url_and_partitions() -> None:
    """A redis+cluster:// URL of seed nodes and a partition count are taken; bad ones are refused."""
    from spiderd.config.convert import CONVERTERS

    convert = CONVERTERS["redis_url"]
    assert convert("redis+cluster://:pw@10.0.0.5:7000,10.0.0.6:7001/") == "redis+cluster://:pw@10.0.0.5:7000,10.0.0.6:7001/"
    for bad in ("redis+cluster://h/", "redis+cluster://h:7000,h/", "redis+cluster://h:70000/"):
        with pytest.raises(ValueError):
            convert(bad)
    assert CONVERTERS["partitions"](12) == 12
    with pytest.raises(ValueError):
        CONVERTERS["partitions"](0)
    assert cfg.from_dict({"pool": {"redis_partitions": 6}}).pool.redis_partitions == 6


def test_sections_are_named_as_the_toml() -> None:
    """Each TOML section is a frozen dataclass of Settings whose fields are its keys, valued as the file says."""
    import dataclasses

    from spiderd.config.settings import SECTIONS

    settings = cfg.from_dict({"fetch": {"timeout": 20, "hosts": {"A.example": {"delay": 2}}},
                              "batch": {"targets": [], "size": 7}, "sitemaps": {"max_files": 3}})
    for name, keys in SCHEMA.items():
        section = getattr(settings, name)
        assert isinstance(section, SECTIONS[name]) and dataclasses.is_dataclass(section)
        assert [f.name for f in dataclasses.fields(section)] == list(keys), name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(section, next(iter(keys)), None)
    assert (settings.fetch.timeout, settings.batch.targets, settings.batch.size) == (20.0, (), 7)
    assert (settings.sitemaps.max_files, settings.fetch.hosts["a.example"].delay) == (3, 2.0)


def test_local_target_needs_the_all_role() -> None:
    """batch.targets = ["local"] (the default) in the frontier role is one line at load naming batch.targets."""
    with pytest.raises(cfg.ConfigError, match=r'^x.toml: batch.targets: "local" needs the all role'):
        cfg.from_dict({"spiderd": {"role": "frontier"}}, "x.toml")
    assert cfg.from_dict({"spiderd": {"role": "frontier"}, "batch": {"targets": ["h:6800"]}}).batch.targets == ("h:6800",)
    assert cfg.from_dict({"spiderd": {"role": "worker"}}).spiderd.role == "worker"


def test_feed_transport_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """[feed] ca_file must be a PEM CA file, known_hosts a readable file; an sftp:// feed needs known_hosts; an
    unknown scheme and parquet without pyarrow are one line each."""
    settings = cfg.from_dict({})
    assert (settings.feed.ca_file, settings.feed.insecure, settings.feed.known_hosts, settings.feed.timeout,
            settings.feed.partition_grace) == ("", False, "", 60.0, 300.0)
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    for bad, message in (({"feed": {"ca_file": str(not_pem)}}, r"feed\.ca_file: .* holds no PEM CA certificate"),
                         ({"feed": {"ca_file": str(tmp_path / "none.pem")}}, r"feed\.ca_file: no readable file"),
                         ({"feed": {"known_hosts": str(tmp_path / "none")}}, r"feed\.known_hosts: no readable file"),
                         ({"worker": {"feed_template": "sftp://u@h/f/%(batch)s.jl"}},
                          r"worker\.feed_template: an sftp:// feed needs feed\.known_hosts"),
                         ({"batch": {"feed_uri": "scp://u@h/f/%(batch)s.jl"}}, r"batch\.feed_uri: .*expected ftp://, "
                                                                               r"ftps:// or sftp://"),
                         ({"worker": {"feed_template": "ftps://h/f/%(nope)s.jl"}}, r"needs the parameter 'nope'")):
        with pytest.raises(cfg.ConfigError, match=message) as info:
            cfg.from_dict(bad)
        assert len(str(info.value).splitlines()) == 1
    known = tmp_path / "known_hosts"
    known.write_text("")
    ok = cfg.from_dict({"feed": {"known_hosts": str(known)},
                        "worker": {"feed_template": "sftp://u@h:2222/f/dt=%(date)s/hour=%(hour)s/%(batch)s_%(site)s_"
                                                    "%(node)s.jl"}})
    assert ok.worker.feed_template.startswith("sftp://")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    with pytest.raises(cfg.ConfigError, match=r"items\.format = 'parquet': needs the pyarrow package"):
        cfg.from_dict({"items": {"format": "parquet"}})

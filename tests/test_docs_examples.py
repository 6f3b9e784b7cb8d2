"""The docs' examples run: every ``curl`` and ``spiderctl`` command of a ```console block runs against a node
crawling a copy of the demo site, and its output has the shape the docs show; every message of the
troubleshooting page is still one the code prints; the Spark schema shown is the one the demo gives."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from .docnode import API, SITE, DocNode
from .test_docs_config import DOCS, FENCE, ROOT

FIRST = [ROOT / "README.md", ROOT / "docs" / "getting-started.md", ROOT / "docs" / "reference" / "http-api.md",
         ROOT / "docs" / "reference" / "spiderctl.md"]  # the order the examples run in; the other files after
ORDERED = FIRST + [path for path in DOCS if path not in FIRST]
RUN = re.compile(r"^(?:\$ )?(curl|spiderctl)\s")


@dataclass(frozen=True)
class Example:
    where: str
    command: str
    expected: str


def console_examples(path: Path) -> Iterator[Example]:
    """The ``$ command`` lines of the file's ```console blocks, each with the output shown below it."""
    text = path.read_text(encoding="utf-8")
    for block in FENCE.finditer(text):
        if block.group("info").strip() != "console":
            continue
        line = text.count("\n", 0, block.start("body")) + 1
        command, output, start = None, [], line
        for number, row in enumerate(block.group("body").splitlines(), line):
            if row.startswith("$ "):
                if command is not None:
                    yield Example(f"{path.relative_to(ROOT)}:{start}", command, "\n".join(output))
                command, output, start = row[2:], [], number
            elif command is not None:
                output.append(row)
        if command is not None:
            yield Example(f"{path.relative_to(ROOT)}:{start}", command, "\n".join(output))


def stray_commands() -> list[str]:
    """curl and spiderctl lines outside a ```console block, where no output shows what they answer."""
    found = []
    for path in ORDERED:
        text = path.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            if block.group("info").strip() == "console":
                continue
            for row in block.group("body").splitlines():
                if RUN.match(row.strip()):
                    found.append(f"{path.relative_to(ROOT)}: {row.strip()}")
    return found


def shape_errors(expected: Any, actual: Any, where: str = "$") -> list[str]:
    """Where ``actual`` lacks the shape of ``expected``: its keys (recursively) and kinds of value; a list shown
    with an element holds each of its elements to that element's shape; null matches anything."""
    if expected is None or actual is None:
        return []
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected an object, got {json.dumps(actual)[:80]}"]
        return [error for key, value in expected.items()
                for error in ([f"{where}.{key}: missing"] if key not in actual else shape_errors(value, actual[key],
                                                                                               f"{where}.{key}"))]
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{where}: expected a list, got {json.dumps(actual)[:80]}"]
        return [error for item in actual[:5] for error in shape_errors(expected[0], item, f"{where}[]")] if expected \
            else []
    kinds = (bool,) if isinstance(expected, bool) else (str,) if isinstance(expected, str) else (int, float)
    if not isinstance(actual, kinds) or (kinds != (bool,) and isinstance(actual, bool)):
        return [f"{where}: expected {type(expected).__name__}, got {json.dumps(actual)[:80]}"]
    return []


def text_pattern(expected: str) -> re.Pattern[str]:
    """The lines shown as a pattern: words compared one by one (any spacing), a word with a digit matching any word,
    ``...`` anything within a line, a line of ``...`` any lines."""
    parts = []
    for line in expected.splitlines():
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        words = [r".*?".join(r"\S*" if re.search(r"\d", piece) else re.escape(piece) for piece in word.split("..."))
                 for word in line.split()]
        parts.append(r"[ \t]*" + r"[ \t]+".join(words) + r"[ \t]*\n")
    return re.compile("".join(parts) + r"\Z")


def output_errors(expected: str, actual: str) -> list[str]:
    """Why ``actual`` does not have the shape of ``expected`` (none when it does)."""
    try:
        shown = json.loads(expected) if expected.strip() else None
    except ValueError:
        shown = None
    if shown is not None:
        try:
            answer = json.loads(actual)
        except ValueError:
            return [f"expected JSON, got {actual[:200]!r}"]
        return shape_errors(shown, answer)
    text = "".join(line.rstrip() + "\n" for line in actual.splitlines())
    if text_pattern(expected).match(text):
        return []
    return [f"output differs from the docs:\n--- shown\n{expected}\n--- got\n{text}"]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocNode]:
    if shutil.which("curl") is None:
        if os.environ.get("SPIDERD_REQUIRE_SERVICES") == "1":
            pytest.fail("curl is not installed: the docs' curl examples cannot run")
        pytest.skip("curl is not installed")
    started = DocNode(tmp_path_factory.mktemp("docnode"))
    try:
        started.wait_until_crawled()
        yield started
    finally:
        started.stop()


def run(node: DocNode, example: Example) -> list[str]:
    """Run one documented command against the node; what differs from the docs."""
    node.wait_until_crawled(paused_too=True)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               SPIDERD_URL=f"http://{node.localize(API)}", PYTHONPATH=str(ROOT))
    done = subprocess.run(["bash", "-c", node.localize(example.command)], cwd=node.tmp, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    output = done.stdout.replace(node.localize(SITE), SITE).replace(node.localize(API), API)
    if done.returncode != 0:
        return [f"{example.where}: `{example.command}` exited with {done.returncode}: {output[:300]}"]
    return [f"{example.where}: `{example.command}`: {error}" for error in output_errors(example.expected, output)]


EXAMPLES = {str(path.relative_to(ROOT)): [e for e in console_examples(path) if RUN.match(e.command)] for path in ORDERED}


@pytest.mark.parametrize("name", [name for name, examples in EXAMPLES.items() if examples])
def test_examples_answer_as_shown(node: DocNode, name: str) -> None:
    """Each curl and spiderctl example of the file, in order, answers with the shape the docs show."""
    errors = [error for example in EXAMPLES[name] for error in run(node, example)]
    assert not errors, "\n".join(errors)


def test_every_command_shows_its_answer() -> None:
    """curl and spiderctl commands are written in ```console blocks, with their output, so they are run."""
    assert stray_commands() == []
    assert sum(len(examples) for examples in EXAMPLES.values()) >= 20


def test_shape_checks_can_fail() -> None:
    """The checks tell a wrong answer: a missing key, another kind of value, other words, a missing line."""
    assert output_errors('{"a": {"b": 1}, "c": [{"d": "x"}]}', '{"a": {"b": 2.5}, "c": [{"d": "y"}], "e": 0}') == []
    assert output_errors('{"a": {"b": 1}}', '{"a": {}}') == ["$.a.b: missing"]
    assert output_errors('{"c": [{"d": "x"}]}', '{"c": [{"d": 3}]}') == ["$.c[].d: expected str, got 3"]
    assert output_errors("pool:  3 waiting, 0 done\n...", "pool: 10 waiting, 7 done\nmore\nlines\n") == []
    assert output_errors("store: 0 writes pending (...)", "store: 2 writes pending (sqlite:/x)") == []
    assert output_errors("pool: 3 waiting", "pool: 3 leased") != []
    assert output_errors("a\nb", "a\n") != []
    assert output_errors("", "") == [] and output_errors("", "something") != []


TROUBLES = ROOT / "docs" / "troubleshooting.md"
CONFIG_ERRORS: list[dict[str, Any]] = [  # configurations that give the troubleshooting page's configuration errors
    {"fetch": {"timeout": "ten"}},
    {"pool": {"pending_threshold": 20}},
    {"api": {"bind": "0.0.0.0"}},
    {"spiderd": {"role": "frontier"}, "batch": {"targets": ["local"]}},
]


def templates() -> list[list[str]]:
    """The words of every string spiderd prints from, its placeholders left out (f-strings and format strings)."""
    found = []
    for path in (ROOT / "spiderd").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                text = " ".join(part.value for part in node.values
                                if isinstance(part, ast.Constant) and isinstance(part.value, str))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = re.sub(r"\{[^{}]*\}", " ", node.value)
            else:
                continue
            words = WORD.findall(text)
            if len(words) >= 3:
                found.append(words)
    return found


WORD = re.compile(r"[A-Za-z][A-Za-z_]+")


def printed_by(message: str, template: list[str]) -> bool:
    """Every word of the template is in the message, in order (a message ending in ``...`` may stop after four)."""
    i = 0
    for word in WORD.findall(message):
        if i < len(template) and word == template[i]:
            i += 1
    return i == len(template) or (message.rstrip().endswith("...") and i >= min(len(template), 4))


def test_troubleshooting_messages_are_the_codes() -> None:
    """Every message the troubleshooting page explains still comes from the code: the configuration errors as the
    validation gives them, the others with every word of the string the code prints them from."""
    from spiderd.config.settings import ConfigError, from_dict

    text = TROUBLES.read_text(encoding="utf-8")
    messages = [line for block in FENCE.finditer(text) if block.group("info").strip() == "text"
                for line in block.group("body").splitlines() if line.strip()]
    assert len(messages) >= 15
    shown = {}
    for raw in CONFIG_ERRORS:
        with pytest.raises(ConfigError) as error:
            from_dict(raw, "etc/spiderd.toml")
        produced = str(error.value)
        pattern = [m for m in messages if re.fullmatch(".*?".join(map(re.escape, m.split("..."))), produced)]
        assert pattern, f"the page does not show this error as it is now: {produced}"
        shown.update(dict.fromkeys(pattern))
    known = templates()
    missing = [m for m in messages if m not in shown and not any(printed_by(m, t) for t in known)]
    assert missing == [], "messages no longer in the code:\n" + "\n".join(missing)


def test_spark_schema_is_the_demos() -> None:
    """The schema the Spark guide shows is the one ``python -m spiderd.feed.schema`` gives for the demo."""
    from .test_schema import DEMO_DDL

    assert f'schema = "{DEMO_DDL}"' in (ROOT / "docs" / "guide" / "spark.md").read_text(encoding="utf-8")


def routes(module: str) -> set[str]:
    """The paths an API's routes table answers (``b"/path": (b"METHOD", handler)``)."""
    source = (ROOT / "spiderd" / module).read_text(encoding="utf-8")
    return set(re.findall(r'b"(/[^"]*)": \(b"(?:GET|POST)"', source))


def test_every_endpoint_is_documented() -> None:
    """Each path the node's API and the worker's Scrapyd API answer is in their reference pages."""
    api = (ROOT / "docs" / "reference" / "http-api.md").read_text(encoding="utf-8")
    scrapyd = (ROOT / "docs" / "reference" / "scrapyd.md").read_text(encoding="utf-8")
    node_paths, worker_paths = routes("ops/web/api.py"), routes("worker/api.py")
    assert {"/api/status", "/metrics"} <= node_paths and "/schedule.json" in worker_paths
    assert [path for path in sorted(node_paths) if f"{path}`" not in api] == []
    assert [path for path in sorted(worker_paths) if path.lstrip("/") not in scrapyd] == []


def test_every_metric_is_documented() -> None:
    """The metrics table of the operations page lists every series the node declares, and no page names one it does
    not (a counter's samples end in ``_total``, a histogram's in ``_bucket``, ``_sum`` and ``_count``)."""
    declared = set(re.findall(r'"(spiderd_[a-z_]+)"', (ROOT / "spiderd" / "ops" / "web" / "metrics.py").read_text()))
    operations = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    table = {re.sub(r"_total$", "", name) for name in re.findall(r"^\| `(spiderd_[a-z_]+)", operations, re.M)}
    assert table == declared
    pages = [path for path in ORDERED if path.parent.name != "bench"]  # bench/README.md: RESULT keys, not metrics
    named = {re.sub(r"_(total|bucket|sum|count)$", "", name) for path in pages
             for name in re.findall(r"\bspiderd_[a-z_]+\b", path.read_text(encoding="utf-8"))}
    assert sorted(named - declared - {"spiderd_plugin"}) == []

"""Sphinx configuration of spiderd's documentation site (MyST Markdown, the furo theme).

Build it as CI does: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (``pip install '.[docs]'``).
The configuration reference is generated here, at every build, from ``etc/spiderd.toml`` and ``spiderd/config/``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the source tree's spiderd, whatever is installed

from spiderd import __version__  # noqa: E402
from spiderd.config import reference  # noqa: E402

project = "spiderd"
author = "the spiderd developers"
copyright = "spiderd's developers"
release = version = __version__

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links are checked like any other
exclude_patterns = ["_build", "README.md"]
nitpicky = True  # a {confval} or {ref} to nothing is an error under -W

html_theme = "furo"
html_title = f"spiderd {release}"
html_static_path = ["_static"]
html_show_sourcelink = False
smartquotes = False  # commands and TOML in running text keep their straight quotes


def write_reference(app: Any, config: Any) -> None:
    """Write reference/configuration.md from the annotated file and the code (not kept in git)."""
    annotated = reference.read((ROOT / "etc" / "spiderd.toml").read_text(encoding="utf-8"))
    problems = reference.problems(annotated)
    if problems:
        raise RuntimeError("etc/spiderd.toml and spiderd/config/ disagree:\n" + "\n".join(problems))
    target = DOCS / "reference" / "configuration.md"
    page = reference.markdown(annotated)
    if not target.exists() or target.read_text(encoding="utf-8") != page:
        target.write_text(page, encoding="utf-8")


def setup(app: Any) -> None:
    app.connect("config-inited", write_reference)

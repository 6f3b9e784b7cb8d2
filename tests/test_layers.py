"""The layering: the shared packages at the bottom import nothing above them (no role, no tap)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import spiderd

PACKAGE = Path(spiderd.__file__).resolve().parent
ALLOWED = {  # what each bottom layer may use: the page engine, shared by both roles, imports neither role
    "core": ("spiderd.core",),
    "config": ("spiderd.config", "spiderd.core"),
    "engine": ("spiderd.engine", "spiderd.core", "spiderd.fetch", "spiderd.store"),
}


def _modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


def _name(path: Path, root: Path = PACKAGE) -> str:
    """The dotted name of a module file under ``root`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path = PACKAGE) -> set[str]:
    """Every module ``path`` (under the package ``root``) imports, at module level or inside a function, relative
    imports resolved."""
    module = _name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            names.add(".".join([*base, node.module] if node.module else base))
    return names


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_bottom_layers_import_no_role(layer: str) -> None:
    """No module of spiderd.core, spiderd.config or spiderd.engine imports a role package (frontier, worker, feed,
    ...) or tap, nor any package above it."""
    assert _modules(layer), f"no modules found under spiderd/{layer}"
    above = {
        f"{_name(path)} imports {name}"
        for path in _modules(layer)
        for name in imported(path)
        if _within(name, ("spiderd",)) and not _within(name, ALLOWED[layer])
    }
    assert not above, sorted(above)


def test_imports_are_resolved(tmp_path: Path) -> None:
    """The import walk sees function-local and relative imports, so a lazy import cannot hide a dependency."""
    package = tmp_path / "spiderd" / "config"
    package.mkdir(parents=True)
    module = package / "probe.py"
    module.write_text("def f():\n    from spiderd.feed import shipper\n    from ..frontier import cron\n"
                      "    from . import schema\n    import spiderd.worker.config\n")
    expected = {"spiderd.feed", "spiderd.frontier", "spiderd.config", "spiderd.worker.config"}
    assert imported(module, tmp_path / "spiderd") == expected


# The modules that load a configuration (the command line, the demo, SIGHUP, the Scrapy spider, the schema tool); every
# other part is given the sections it reads (spiderd.config.sections).
LOADERS = {"spiderd.tap", "spiderd.demo.config", "spiderd.ops.reload", "spiderd.contrib.scrapy", "spiderd.feed.schema"}


def test_parts_take_sections_not_the_whole_settings() -> None:
    """Outside the configuration package, only the loaders import spiderd.config.settings (the whole Settings)."""
    readers = {
        _name(path)
        for path in sorted(PACKAGE.rglob("*.py"))
        if not _within(_name(path), ("spiderd.config",))
        and {"spiderd.config.settings", "spiderd.config"} & {name for name in imported(path)}
    }
    assert readers <= LOADERS, sorted(readers - LOADERS)

"""The layering: the shared packages at the bottom import nothing above them (no role, no tap), no role imports
another role, and a consumer of the URL pool imports only the narrow contract it uses."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from zope.interface.interface import InterfaceClass

import spiderd
from spiderd.contracts import pool as pool_contracts

PACKAGE = Path(spiderd.__file__).resolve().parent
ALLOWED = {"core": ("spiderd.core",), "config": ("spiderd.config", "spiderd.core"),
           "contracts": ("spiderd.contracts", "spiderd.core")}  # what each bottom layer may use

# What each package of spiderd may import besides itself (and the root package, for its __version__).  At the
# bottom the shared layers: core, config (the settings' sections) and contracts (what parts ask of each other,
# owned by no role).  Above them the parts a role is made of, which import no other part and no role: fetch, feed,
# store.  Then the page engine, shared by both roles; then the two roles, frontier and worker, neither importing
# the other; then ops (the API, metrics, reload: the operator's view of the roles); demo and contrib beside them;
# tap, the composition root, on top.
SHARED = ("spiderd.core", "spiderd.config", "spiderd.contracts")
PARTS = ("spiderd.fetch", "spiderd.feed", "spiderd.store")
ROLES = ("spiderd.frontier", "spiderd.worker")
LAYERS: dict[str, tuple[str, ...]] = {
    "core": (),
    "config": ("spiderd.core",),
    "contracts": ("spiderd.core",),
    "fetch": SHARED,
    "feed": SHARED,
    "store": SHARED,
    "engine": (*SHARED, *PARTS),
    "frontier": (*SHARED, *PARTS, "spiderd.engine"),
    "worker": (*SHARED, *PARTS, "spiderd.engine"),
    "ops": (*SHARED, *PARTS, "spiderd.engine", *ROLES),
    "demo": SHARED,
    "contrib": (*SHARED, "spiderd.fetch", "spiderd.frontier"),  # (its middleware runs the frontier's batcher)
    "tap": (*SHARED, *PARTS, "spiderd.engine", *ROLES, "spiderd.ops", "spiderd.demo"),
}

# The pool's backends, which only the frontier (and the composition roots: tap, which builds a node, and Scrapy's
# batch middleware, which builds its batcher's ledger) may import.
POOL_INTERNALS = ("spiderd.frontier.pool",)
COMPOSITION_ROOTS = ("spiderd.tap", "spiderd.contrib.batchmiddleware")
# The pool's narrow contracts (spiderd.contracts.pool) each consumer takes: the one it uses, no other.
CONTRACTS = {
    "spiderd.feed.items": {"ICheckpoints"},
    "spiderd.feed.writers": {"ICheckpoints"},
    "spiderd.frontier.batcher": {"IBatchLedger"},
    "spiderd.frontier.seeds": {"ISeedLists"},
    "spiderd.frontier.scheduler": {"ISeedTimerPool", "IRecrawl"},
    "spiderd.frontier.sitemapservice": {"ISitemapPool"},
    "spiderd.demo.config": {"IURLQueue"},
    "spiderd.ops.web.node": {"IURLQueue", "IURLPoolAdmin"},
    "spiderd.ops.web.api": {"IURLQueue", "IURLPoolAdmin"},
    "spiderd.ops.web.streams": {"IURLPoolAdmin"},
    "spiderd.frontier.crawler": {"ICrawlPool"},
    "spiderd.frontier.process": {"ICrawlPool"},
    "spiderd.frontier.build": {"ICrawlPool"},
}
# Who holds the whole pool (IURLPool), beside the backends and the pool service (spiderd.frontier.pool, which
# provide the contracts): the composition root only.
PROVIDERS = ("spiderd.contracts", "spiderd.frontier.pool")
WHOLE_POOL = ("spiderd.tap",)
POOL_CONTRACT_MODULES = ("spiderd.contracts.pool",)


def _modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py")) if layer != "tap" else [PACKAGE / "tap.py"]


def _name(path: Path, root: Path = PACKAGE) -> str:
    """The dotted name of a module file under ``root`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path = PACKAGE) -> list[tuple[str, str | None]]:
    """Every import of ``path`` (under the package ``root``), at module level or inside a function, as (module,
    name): ``import a.b`` is ("a.b", None), ``from a import b, c`` is ("a", "b") and ("a", "c"); relative imports
    are resolved."""
    module = _name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, node.module] if node.module else base)
            found.extend((source, alias.name) for alias in node.names)
    return found


def imported(path: Path, root: Path = PACKAGE) -> set[str]:
    """Every module ``path`` (under the package ``root``) imports, at module level or inside a function, relative
    imports resolved."""
    return {module for module, _ in _imports(path, root)}


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_bottom_layers_import_no_role(layer: str) -> None:
    """No module of spiderd.core, spiderd.config or spiderd.contracts imports a role package (frontier, fetch,
    feed, ...) or tap."""
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


def test_every_package_has_a_layer() -> None:
    """Each package (and module) at the top of spiderd is placed in LAYERS, so a new one cannot go unchecked."""
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    tops = packages | {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    assert tops == set(LAYERS), sorted(tops ^ set(LAYERS))


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_packages_import_only_their_layers(layer: str) -> None:
    """A package imports itself, the root package and what its layer allows only: no role imports another role
    (frontier, worker), no part another part or a role (fetch, feed, store), nothing imports tap."""
    assert _modules(layer), f"no modules found under spiderd/{layer}"
    own = "spiderd.tap" if layer == "tap" else f"spiderd.{layer}"
    outside = {
        f"{_name(path)} imports {name}"
        for path in _modules(layer)
        for name in imported(path)
        if _within(name, ("spiderd",)) and name != "spiderd" and not _within(name, (own, *LAYERS[layer]))
    }
    assert not outside, sorted(outside)


def test_pool_internals_stay_in_the_frontier() -> None:
    """Outside spiderd.frontier, only the composition roots import the pool's backends or the frontier's whole-pool
    interfaces: every other part reaches the pool through spiderd.contracts."""
    reaching = {
        f"{_name(path)} imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not _within(_name(path), ("spiderd.frontier", *COMPOSITION_ROOTS))
        for name in imported(path)
        if _within(name, POOL_INTERNALS)
    }
    assert not reaching, sorted(reaching)


def _pool_contracts_of(path: Path, root: Path = PACKAGE) -> set[str]:
    """The pool contracts (interfaces of spiderd.contracts.pool) ``path`` (under ``root``) imports; "*" for an
    import of the whole module, which would hide which ones it uses."""
    names = set()
    for module, name in _imports(path, root):
        if (module in POOL_CONTRACT_MODULES and name is None) or (module, name) == ("spiderd.contracts", "pool"):
            names.add("*")
        elif module in POOL_CONTRACT_MODULES and isinstance(getattr(pool_contracts, name or "", None), InterfaceClass):
            names.add(name or "")
    return names


def test_consumers_import_only_their_narrow_contract() -> None:
    """Each consumer of the pool imports, of its contracts, only the narrow ones it is listed with (CONTRACTS); only
    the modules of WHOLE_POOL import the whole pool (IURLPool); the backends provide them all."""
    assert len(CONTRACTS) >= 8 and all(isinstance(getattr(pool_contracts, name), InterfaceClass)
                                       for names in CONTRACTS.values() for name in names)
    wider = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _name(path)
        if _within(module, PROVIDERS):
            continue
        whole = {"IURLPool", "IURLPoolAdmin"} if _within(module, WHOLE_POOL) else set()
        allowed = CONTRACTS.get(module, set()) | whole
        extra = _pool_contracts_of(path) - allowed
        if extra:
            wider[module] = sorted(extra)
    assert not wider, wider


def test_contract_imports_are_read(tmp_path: Path) -> None:
    """The contract walk sees the narrow contracts imported by name, at module level or in a function, and a
    whole-module import."""
    package = tmp_path / "spiderd" / "feed"
    package.mkdir(parents=True)
    module = package / "probe.py"
    module.write_text("from spiderd.contracts.pool import HOSTS_MOST, ICheckpoints\n"
                      "def f():\n    from spiderd.contracts.pool import IURLPool\n"
                      "    from spiderd.contracts import pool\n")
    assert _pool_contracts_of(module, tmp_path / "spiderd") == {"ICheckpoints", "IURLPool", "*"}


# The modules that load a configuration (the command line, the demo, SIGHUP, the running configuration that SIGHUP and
# the sites API change (its book, its template tester), the Scrapy spider, the schema tool); every other part is given the sections it reads
# (spiderd.config.sections).
LOADERS = {"spiderd.tap", "spiderd.demo.config", "spiderd.ops.reload", "spiderd.ops.liveconfig", "spiderd.ops.sitebook",
           "spiderd.ops.sitetry", "spiderd.contrib.scrapy", "spiderd.feed.schema"}


def test_parts_take_sections_not_the_whole_settings() -> None:
    """Outside the configuration package, only the loaders import spiderd.config.settings (the whole Settings)."""
    readers = {
        _name(path)
        for path in sorted(PACKAGE.rglob("*.py"))
        if not _within(_name(path), ("spiderd.config",))
        and {"spiderd.config.settings", "spiderd.config"} & {name for name in imported(path)}
    }
    assert readers <= LOADERS, sorted(readers - LOADERS)

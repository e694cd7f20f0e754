"""The layout's import rules (docs/architecture.md, "Layout"), checked on the real import
graph (grimp; imports inside functions count too):

- no import cycle between modules of ``app``;
- ``app.engine`` imports nothing from ``app.api`` (the engine runs without the web stack);
- no route module imports another route module (shared code lives in app.api.service and
  app.api.status).
"""

from __future__ import annotations

import grimp
import pytest


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("app", cache_dir=None)


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), plus self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v)):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1 or v in graph.find_modules_directly_imported_by(v):
                out.append(sorted(scc))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return out


def test_the_graph_covers_the_packages(graph):
    # A rule checked on an empty or partial graph would pass for nothing.
    for module in ("app.engine.pipeline", "app.engine.verify.engine", "app.api.routes.ws", "app.api.service",
                   "app.wire.zap", "app.client.http", "app.engine.receipts.open"):
        assert module in graph.modules
    assert graph.direct_import_exists(importer="app.api.routes.ws", imported="app.api.service")


def test_no_import_cycles(graph):
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    g = grimp.ImportGraph()
    for m in ("a", "b", "c", "d"):
        g.add_module(m)
    g.add_import(importer="a", imported="b")
    g.add_import(importer="b", imported="c")
    g.add_import(importer="c", imported="a")
    g.add_import(importer="c", imported="d")
    assert _cycles(g) == [["a", "b", "c"]]


def test_engine_imports_nothing_from_the_api(graph):
    engine = {"app.engine"} | graph.find_descendants("app.engine")
    bad = [(m, i) for m in sorted(engine) for i in sorted(graph.find_modules_directly_imported_by(m))
           if i == "app.api" or i.startswith("app.api.") or i == "app.main"]
    assert bad == []
    assert not graph.chain_exists(importer="app.engine", imported="app.api", as_packages=True)


def test_no_route_module_imports_another(graph):
    routes = graph.find_children("app.api.routes")
    assert len(routes) >= 8
    bad = [(r, i) for r in sorted(routes) for i in graph.find_modules_directly_imported_by(r) if i in routes]
    assert bad == []

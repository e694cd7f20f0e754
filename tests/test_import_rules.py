"""The layout's import rules (docs/architecture.md, "Layout"), checked on the real import
graph (grimp; imports inside functions count too):

- no import cycle between modules of ``app``, nor between its packages: an import from one
  package into another is an edge between the two siblings that hold them (``app.engine.verify``
  → ``app.engine.backends``), so a cycle through several modules of two packages counts;
- ``app.core`` imports nothing from the rest of ``app`` (it is the bottom floor);
- ``app.engine`` imports nothing from ``app.api`` (the engine runs without the web stack);
- no route module imports another route module (shared code lives in app.api.service and
  app.api.status);
- the client package ``zapverify`` imports from ``app`` only the floors it shares with the
  server, ``app.core`` (registry, items, errors, encodings, the Merkle leaf and proof check)
  and ``app.wire`` (the ZAP codec), never the engine, the API or the settings — but for the
  load generator's signers, ``app.engine.reference.kat``, which reach only ``app.core`` and the
  reference's constants (``zapverify bench`` signs real items with the reference libraries); and of ``app``
  only the command line (``app.cli``, a user of the client) imports ``zapverify``, so the
  server never depends on its client.
"""

from __future__ import annotations

import grimp
import pytest


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("app", "zapverify", cache_dir=None)


#: What the client may import from the server's package (the shared floors).
CLIENT_MAY_IMPORT = ("app.core", "app.wire")
#: The one more edge: the load generator signs its items with the reference signers.
LOADGEN_SIGNERS = ("zapverify.loadgen", "app.engine.reference.kat")


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


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


def _package_edges(graph) -> dict[str, set[str]]:
    """Sibling-package (or sibling-module) edges: ``m`` importing ``w`` is an edge between the
    children of their deepest common package that hold them; a module importing one of its
    own ancestors' ``__init__`` is no edge."""
    edges: dict[str, set[str]] = {}
    for m in graph.modules:
        for w in graph.find_modules_directly_imported_by(m):
            a, b = m.split("."), w.split(".")
            k = 0
            while k < min(len(a), len(b)) and a[k] == b[k]:
                k += 1
            # Between the two top-level packages (k == 0) the layering is finer than a package
            # edge: app.core and app.wire < zapverify < app.cli (the client rules below).
            if 0 < k < len(a) and k < len(b):
                edges.setdefault(".".join(a[:k + 1]), set()).add(".".join(b[:k + 1]))
    return edges


def _edge_graph(edges: dict[str, set[str]]):
    g = grimp.ImportGraph()
    for a, targets in edges.items():
        g.add_module(a)
        for b in targets:
            g.add_module(b)
            g.add_import(importer=a, imported=b)
    return g


def test_the_graph_covers_the_packages(graph):
    # A rule checked on an empty or partial graph would pass for nothing.
    for module in ("app.engine.pipeline", "app.engine.verify.engine", "app.api.routes.ws", "app.api.service",
                   "app.wire.zap", "app.core.schemes", "app.engine.receipts.open", "zapverify.http",
                   "zapverify.proofs", "zapverify.loadgen", "zapverify.ingest"):
        assert module in graph.modules
    assert graph.direct_import_exists(importer="app.api.routes.ws", imported="app.api.service")


def test_no_import_cycles(graph):
    assert _cycles(graph) == []


def test_no_import_cycles_between_packages(graph):
    assert _cycles(_edge_graph(_package_edges(graph))) == []


def test_the_package_rule_sees_a_cycle_through_two_packages():
    # x.p.a → x.q.b and x.q.c → x.p.d: no module cycle, but the packages p and q import each other.
    g = grimp.ImportGraph()
    for m in ("x", "x.p", "x.p.a", "x.p.d", "x.q", "x.q.b", "x.q.c"):
        g.add_module(m)
    g.add_import(importer="x.p.a", imported="x.q.b")
    g.add_import(importer="x.q.c", imported="x.p.d")
    g.add_import(importer="x.p.a", imported="x")  # an ancestor's __init__: no edge
    assert _cycles(g) == []
    assert _cycles(_edge_graph(_package_edges(g))) == [["x.p", "x.q"]]


def test_core_imports_nothing_else_from_app(graph):
    outside = {(m, w) for m in graph.find_children("app.core") | {"app.core"}
               for w in graph.find_modules_directly_imported_by(m)
               if w.startswith("app") and not (w == "app.core" or w.startswith("app.core."))}
    assert outside == set()


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


def test_the_client_imports_only_the_shared_floors_of_app(graph):
    client = {"zapverify"} | graph.find_descendants("zapverify")
    bad = [(m, i) for m in sorted(client) for i in sorted(graph.find_modules_directly_imported_by(m))
           if _in(i, ("app",)) and not _in(i, CLIENT_MAY_IMPORT) and (m, i) != LOADGEN_SIGNERS]
    assert bad == []
    signers = graph.find_upstream_modules(LOADGEN_SIGNERS[1])
    assert signers and all(_in(m, (*CLIENT_MAY_IMPORT, "app.engine.reference.reference")) for m in signers), signers
    for floor in CLIENT_MAY_IMPORT:  # and the floors, in turn, reach nothing above them
        for above in ("app.engine", "app.api", "app.main", "app.config", "zapverify"):
            assert not graph.chain_exists(importer=floor, imported=above, as_packages=True), (floor, above)


def test_only_the_command_line_imports_the_client(graph):
    server = {m for m in graph.modules if _in(m, ("app",))}
    users = sorted(m for m in server for i in graph.find_modules_directly_imported_by(m) if _in(i, ("zapverify",)))
    assert users and set(users) == {"app.cli"}

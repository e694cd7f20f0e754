"""The docs describe what exists: the tree in docs/architecture.md is the tree of app/, every
setting is in docs/operations.md, every docs/ citation names a real page and heading, and
nothing cites DESIGN.md or a path on a build machine."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from app.config import Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _tree(text: str) -> set[str]:
    """Paths listed in the ``app/`` code block of architecture.md (two spaces per level;
    several names on one line separated by commas; a description after two spaces)."""
    block = text.split("```\napp/\n", 1)[1].split("```", 1)[0]
    paths, stack = set(), ["app"]
    for line in block.splitlines():
        if not line.strip() or not line.startswith("  "):
            if line and not line.startswith(" "):
                break  # tests/, bench/ ...: outside app/
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        if not re.fullmatch(r"[\w./]+(, [\w./]+)*", head):
            continue  # a description's continuation line
        del stack[depth:]
        for name in head.split(", "):
            paths.add("/".join(stack + [name.rstrip("/")]))
        if head.endswith("/"):
            stack.append(head.rstrip("/"))
    return paths


def _modules() -> set[str]:
    out = set()
    for p in (ROOT / "app").rglob("*.py"):
        rel = p.relative_to(ROOT).as_posix()
        if "/kernels/" in rel or "__pycache__" in rel:
            continue  # app/engine/kernels is described by docs/kernels.md
        body = ast.parse(p.read_text()).body
        if p.name == "__init__.py" and all(isinstance(n, ast.Expr) for n in body):
            continue  # a package docstring only
        out.add(rel)
    return out


def test_architecture_tree_is_the_tree_of_app():
    listed = _tree((DOCS / "architecture.md").read_text())
    missing = sorted(m for m in _modules() if m not in listed)
    assert missing == [], f"modules not in docs/architecture.md's tree: {missing}"
    stale = sorted(p for p in listed if not (ROOT / p).exists())
    assert stale == [], f"docs/architecture.md lists paths that do not exist: {stale}"
    assert "app/engine/pipeline.py" in listed and "app/engine/kernels" in listed


def _settings_table() -> dict[str, str]:
    """``{variable: default as written}`` of the first table under operations.md's "Settings"."""
    section = (DOCS / "operations.md").read_text().split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    table = section.split("\n| variable |", 1)[1].split("\n\n", 1)[0]
    return dict(re.findall(r"^\| `(ZAPVERIFY_[A-Z0-9_]+)`[^|]*\| ([^|]*?) \|", table, re.M))


def _written(value: object) -> str:
    """A default as the table writes it: Python's repr of text in backticks, JSON for lists
    and dicts, the number or bool as it prints."""
    if isinstance(value, (list, dict)):
        return f"`{json.dumps(value)}` (JSON)"
    if isinstance(value, Path):
        return f"`{value}`"
    return f"`{value!r}`"


def test_the_settings_table_has_a_row_per_setting_with_its_default():
    """Every Settings field has a row in docs/operations.md's settings table, and no row names
    a setting that is not one (issue 53: the six access-control settings were missing, the
    rate limit's burst default stated nowhere); each default reads as the field's."""
    rows = _settings_table()
    fields = {f"ZAPVERIFY_{n.upper()}": f for n, f in Settings.model_fields.items()}
    assert sorted(set(fields) - set(rows)) == [], "settings without a row"
    assert sorted(set(rows) - set(fields)) == [], "rows that are no setting"
    wrong = {}
    for name, field in fields.items():
        default = field.get_default(call_default_factory=True)
        if name == "ZAPVERIFY_INSTANCE":  # made per host
            continue
        if rows[name].strip("`").lower() != _written(default).strip("`").lower():
            wrong[name] = (rows[name], _written(default))
    assert wrong == {}


def _sources() -> list[Path]:
    files = [p for p in (ROOT / "app").rglob("*") if p.suffix in (".py", ".cu", ".cuh", ".html")]
    files += [p for d in ("tests", "bench") for p in (ROOT / d).rglob("*.py") if p != Path(__file__)]
    files += [p for p in (ROOT / "scripts").iterdir() if p.is_file()]
    files += list(DOCS.glob("*.md")) + [ROOT / "README.md", ROOT / "deploy" / "verifier.env"]
    return files


def test_docs_citations_name_a_real_page_and_heading():
    headings = {p.name: {h.strip() for h in re.findall(r"^#+ (.+)$", p.read_text(), re.M)} for p in DOCS.glob("*.md")}
    bad = []
    for f in _sources():
        text = f.read_text(errors="replace")
        for page, quoted in re.findall(r"docs/([\w-]+\.md)((?:,?\s*\"[^\"\n]+\"(?:\s+and\s+\"[^\"\n]+\")?)?)", text):
            if page not in headings:
                bad.append(f"{f.relative_to(ROOT)}: docs/{page}")
                continue
            for h in re.findall(r"\"([^\"\n]+)\"", quoted):
                if h not in headings[page]:
                    bad.append(f"{f.relative_to(ROOT)}: docs/{page} \"{h}\"")
    assert bad == []


def test_nothing_cites_a_machine_path():
    bad = [str(f.relative_to(ROOT)) for f in _sources() if "/work/" in f.read_text(errors="replace")]
    assert bad == []


def test_python_and_docs_cite_docs_not_design_md():
    # The kernel sources (.cu/.cuh) are edited by the kernel work; their comments are
    # checked by that work, not here.
    bad = [str(f.relative_to(ROOT)) for f in _sources()
           if f.suffix not in (".cu", ".cuh") and "DESIGN.md" in f.read_text(errors="replace")]
    assert bad == []

"""The kernel sources keep the layout and the one naming rule docs/kernels.md ("Layout and
names") states: folders by kind, includes only downwards, every defined name ``zv_``/``ZV_``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.engine.device import hostbuild, registry

KERNELS = hostbuild.KERNEL_DIR
SOURCES = sorted(KERNELS.rglob("*.cu*"))

#: What each folder may include, by the first part of the included path (docs/kernels.md).
MAY_INCLUDE = {
    "tables": {"zv_port.cuh"},
    "hashes": {"zv_port.cuh", "hashes"},
    "fields": {"zv_port.cuh", "tables", "fields"},
    "curves": {"zv_port.cuh", "tables", "fields", "hashes", "curves"},
    "schemes": {"zv_port.cuh", "tables", "fields", "hashes", "curves", "schemes"},
}


def _rel(p: Path) -> str:
    return p.relative_to(KERNELS).as_posix()


def test_every_source_sits_in_a_kind_folder():
    assert SOURCES, KERNELS
    assert {_rel(p) for p in SOURCES if p.parent == KERNELS} == {"zv_port.cuh"}
    assert {p.parent.name for p in SOURCES if p.parent != KERNELS} == set(MAY_INCLUDE)
    names = [p.name for p in SOURCES]
    assert len(names) == len(set(names)), "a file name is used twice: find_source needs it unique"


def test_the_service_sources_are_found_by_name():
    for source in registry.service_sources():
        assert hostbuild.find_source(source.name) == source.path


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_includes_name_a_header_by_its_path_and_only_go_down(path):
    included = re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(), re.M)
    allowed = MAY_INCLUDE.get(path.parent.name, set()) if path.parent != KERNELS else set()
    for inc in included:
        assert (KERNELS / inc).is_file(), f"{_rel(path)} includes {inc!r}, which is no path under {KERNELS}"
        assert inc.split("/")[0] in allowed, f"{_rel(path)} ({path.parent.name}/) may not include {inc!r}"


def _strip(text: str) -> str:
    """The text without comments, string literals or preprocessor lines (kept: #define names)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    text = re.sub(r"\\\n", " ", text)  # macro continuation lines
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


_NOT_NAMES = {"decltype", "sizeof", "alignas", "static_assert", "__launch_bounds__", "__maxnreg__", "template"}


def defined_names(text: str) -> set[str]:
    """The names ``text`` defines at file scope: macros, functions (definitions and
    prototypes), types, constants and variables.  A small scanner, not a C++ parser: it
    reads the statements outside every brace pair, which is where these sources define
    everything."""
    names = set(re.findall(r"^\s*#\s*define\s+([A-Za-z_]\w*)", text, re.M))
    body = _strip(text)
    depth, start, after_brace, statements = 0, 0, False, []
    for i, ch in enumerate(body):
        if ch == "{":
            if depth == 0:
                statements.append((body[start:i], after_brace))
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                start, after_brace = i + 1, True
        elif ch == ";" and depth == 0:
            statements.append((body[start:i], after_brace))
            start, after_brace = i + 1, False
    for stmt, closes_type in statements:
        stmt = re.sub(r"template\s*<[^{;]*?>", " ", stmt)
        stmt = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", stmt).strip()
        if not stmt or stmt.startswith("static_assert") or re.fullmatch(r"(typedef\s+)?(struct|union|enum)", stmt):
            continue
        if closes_type and re.fullmatch(r"[A-Za-z_]\w*", stmt):  # "typedef struct { ... } name;"
            names.add(stmt)
            continue
        if m := re.search(r"\b(?:struct|union|enum)\s+([A-Za-z_]\w*)\s*$", stmt):
            names.add(m.group(1))
            continue
        calls = [n for n in re.findall(r"\b([A-Za-z_]\w*)\s*\(", stmt)
                 if n not in _NOT_NAMES and not n.isupper() and not n.startswith("ZV_")]
        if calls:
            names.add(calls[0])
        elif m := re.search(r"\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=|$)", stmt):
            names.add(m.group(1))
    return names


def test_the_scanner_sees_each_kind_of_definition():
    text = ("#define ZV_A 1\n#define bad_macro 2\n"
            "typedef struct { zv_u32 v[8]; } zv_fe;\ntypedef struct { int x; } bad_type;\n"
            "ZV_HD void zv_ok(zv_fe *r) { if (r) { r->v[0] = 0; } }\n"
            "template <int N> ZV_HD int bad_fn(const zv_u32 a[N]);\n"
            "ZV_CONSTANT zv_u32 ZV_TABLE_X[2] = {1, 2};\nZV_TABLE zv_u32 bad_table[2] = {1, 2};\n"
            "__launch_bounds__(128) ZV_KERNEL void zv_verify_x(int n) { }\n"
            "template <int N> struct bad_traits { static int m(); };\n")
    assert defined_names(text) == {"ZV_A", "bad_macro", "zv_fe", "bad_type", "zv_ok", "bad_fn", "ZV_TABLE_X",
                                   "bad_table", "zv_verify_x", "bad_traits"}


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_every_name_a_source_defines_starts_with_zv(path):
    names = defined_names(path.read_text())
    assert names, f"{_rel(path)}: the scanner found no definition at all"
    wrong = sorted(n for n in names if not n.startswith(("zv_", "ZV_")))
    assert not wrong, f"{_rel(path)} defines {wrong}: docs/kernels.md's rule is zv_<object>_ / ZV_"

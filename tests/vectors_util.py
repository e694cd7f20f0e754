"""Run converted vector records through the engine and report disagreements."""

from __future__ import annotations

from app.vectors import from_json


def run_records(engine, records: list[dict]) -> tuple[list, list[bool]]:
    kas = [from_json(r) for r in records]
    got = engine.run([ka.item for ka in kas]).verdicts.tolist()
    bad = [(ka.source, ka.id, ka.expected, g) for ka, g in zip(kas, got) if g != ka.expected]
    return bad, got

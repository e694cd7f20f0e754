"""bench/results/containers.md from what scripts/container_test measured.

    python -m tests.containers.report MEASURED TIMINGS [README]  > bench/results/containers.md

With README, the block between its ``<!-- containers.md: begin`` and ``<!-- containers.md:
end -->`` lines is replaced by the report's tables too (so the README's figures are the
script's, never typed).

MEASURED: ``key=value`` lines written by the script (``size_<image>`` in bytes,
``build_s_<image>``, ``ready_s_*``, ``tests_s``, ``script_s``, ``docker``, ``compose``).
TIMINGS: JSON written by tests/containers (``restart_ready_s``); may be absent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file or with -m from the root

from bench import provenance  # noqa: E402

#: (key in MEASURED, tag, what it is), in table order.
IMAGES = [
    ("cpu", "zapverify:cpu", "Dockerfile"),
    ("cuda", "zapverify:cuda", "Dockerfile.cuda: CuPy with the CUDA 13 runtime and NVRTC wheels"),
    ("debian", "zv-standin/debian:bookworm", "stand-in base: debootstrap minbase, imported"),
    ("python", "zv-standin/python:bookworm", "stand-in for python:3.12-slim-bookworm"),
    ("nginx", "zv-standin/nginx:bookworm", "stand-in for nginx:1.28-alpine"),
    ("postgres", "zv-standin/postgres:bookworm", "stand-in for postgres:17-alpine"),
]


def read_measured(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def render(m: dict[str, str], timings: dict, prov: dict | None = None) -> str:
    """The Markdown report; ``prov`` is the run's provenance (bench/provenance.py, collected
    now when not given).  Raises KeyError when a measurement is missing."""
    prov = prov or provenance.collect()
    lines = [
        "# Container images and the compose deployment",
        "",
        provenance.markdown_line(prov),
        "",
        "Written by `scripts/container_test`; do not edit by hand.  "
        f"Machine: {prov['machine']['cores']} CPUs ({prov['machine']['arch']}), shared with other jobs "
        f"(times are one run, not medians).  Docker {m['docker']} (overlay2, legacy builder), "
        f"docker-compose {m['compose']}.  A build time of \"cached\" means the layers were kept "
        "from an earlier run (`ZAPVERIFY_CONTAINER_WORK`).",
        "",
        "| image | what | size | build time |",
        "|---|---|---:|---:|",
    ]
    for key, tag, what in IMAGES:
        size = int(m[f"size_{key}"]) / 1e6
        built = int(m[f"build_s_{key}"])
        lines.append(f"| `{tag}` | {what} | {size:.0f} MB | {f'{built} s' if built else 'cached'} |")
    lines += [
        "",
        "Size: the unpacked image (`docker image inspect .Size`), base layers included.  "
        "Build time includes downloading every package (Debian, PyPI).",
        "",
        "| start-to-ready | seconds |",
        "|---|---:|",
        f"| `zapverify:cuda` alone, no GPU: `docker run` to `/readyz` 200 | {float(m['ready_s_cuda_nogpu']):.1f} |",
        f"| `docker-compose up` (PostgreSQL, 2 replicas, nginx) to `/readyz` 200 through nginx "
        f"| {float(m['ready_s_stack']):.1f} |",
    ]
    if "restart_ready_s" in timings:
        lines.append(f"| `docker-compose down` + `up` (volumes kept) to `/readyz` 200 through nginx "
                     f"| {timings['restart_ready_s']:.1f} |")
    lines += [
        "",
        f"System checks against the containers (`tests/containers`): {m['tests_s']} s.  "
        f"The whole script: {m['script_s']} s.",
    ]
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- containers.md: begin", "<!-- containers.md: end -->"


def splice(readme: str, report: str) -> str:
    """``readme`` with the lines between its BEGIN and END markers replaced by the tables
    and notes of ``report`` (from its first table on: the title, provenance and machine
    paragraphs dropped).  Raises ValueError when a marker is missing."""
    lines = readme.splitlines(keepends=True)
    try:
        b = next(i for i, line in enumerate(lines) if line.startswith(BEGIN))
        e = next(i for i, line in enumerate(lines) if line.startswith(END) and i > b)
    except StopIteration:
        raise ValueError(f"README has no {BEGIN} … {END} block") from None
    body = report[report.index("\n|") + 1:]  # from the first table on
    return "".join(lines[: b + 1]) + body + "".join(lines[e:])


def main(argv: list[str]) -> int:
    measured = read_measured(Path(argv[0]))
    timings = json.loads(Path(argv[1]).read_text()) if len(argv) > 1 and Path(argv[1]).exists() else {}
    report = render(measured, timings)
    sys.stdout.write(report)
    if len(argv) > 2:
        readme = Path(argv[2])
        readme.write_text(splice(readme.read_text(), report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

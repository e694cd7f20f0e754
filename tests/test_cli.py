"""``zapverify probe``: the host report in text and JSON, and a forced transport that fails."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from app.config import get_settings
from tests import fakehost as fh


@pytest.fixture(autouse=True)
def fresh_settings(monkeypatch):
    monkeypatch.setenv("ZAP_UMA_POOL_BYTES", str(64 << 20))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_probe_linux_without_gpu(tmp_path, capsys):
    assert main(["probe", "--root", str(fh.linux(tmp_path)), "--system", "Linux", "--machine", "x86_64"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Linux, no GPU → heap"
    assert "  not uma:" in lines and "    - no RDMA HCA in /sys/class/infiniband" in lines
    assert lines[lines.index("pool") + 1].startswith("  heap, capacity ")


def test_probe_json(tmp_path, capsys):
    fh.add_nvidia_gpu(fh.linux(tmp_path), "NVIDIA H100 80GB HBM3")
    fh.add_hca(tmp_path)
    fh.add_module(tmp_path, "nvidia_peermem")
    assert main(["probe", "--json", "--root", str(tmp_path), "--system", "Linux", "--machine", "x86_64"]) == 0
    d = json.loads(capsys.readouterr().out)
    # CuPy is not consulted for another root, so this DGX tree has no usable CUDA: heap, and why
    assert d["pick"]["headline"] == "DGX with CX-7 + nvidia-peermem → heap"
    assert d["host"]["gpus"][0] == {"index": 0, "name": "NVIDIA H100 80GB HBM3", "source": "driver",
                                    "total_bytes": None, "free_bytes": None, "compute_capability": None,
                                    "bus": "0000:01:00.0"}
    gpudirect = d["pick"]["checks"][0]
    assert gpudirect["name"] == "gpudirect" and gpudirect["missing"][0].startswith("no CUDA (CuPy is not importable")
    assert d["pool"]["requested_bytes"] == 64 << 20 and d["pool"]["source"] == "heap"


def test_probe_this_host(capsys):
    assert main(["probe"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert " → " in first


def test_forced_transport_that_cannot_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZAP_TRANSPORT", "gpudirect")
    get_settings.cache_clear()
    assert main(["probe", "--root", str(fh.linux(tmp_path)), "--system", "Linux"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zapverify: TRANSPORT_UNAVAILABLE: transport 'gpudirect' (ZAP_TRANSPORT) is unavailable")
    assert "no RDMA HCA in /sys/class/infiniband" in err and "libibverbs not found" in err

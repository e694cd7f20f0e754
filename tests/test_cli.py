"""`zapverify check-vectors`, `selftest` and `probe`, and their exit codes."""

import json

import pytest

from app.cli import main
from app.config import get_settings
from app.core.schemes import SCHEMES
from app.vectors import generated, generated_aggregate, write_jsonl
from tests import fakehost as fh


def test_check_vectors_agrees_on_fresh_generated_items_of_every_scheme(tmp_path, capsys):
    path = tmp_path / "generated.jsonl"
    n = write_jsonl(path, generated(2, 2, seed=42))
    assert n == len(SCHEMES) * 4
    assert main(["check-vectors", str(path), "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert f"vectors={n} agree={n} disagree=0" in out
    for s in SCHEMES:
        assert s in out


def test_check_vectors_exits_1_on_a_disagreement(tmp_path, capsys):
    path = tmp_path / "flipped.jsonl"
    recs = list(generated(1, 0, seed=1, schemes=["ed25519", "secp256k1"]))
    recs[0]["expected"] = not recs[0]["expected"]
    write_jsonl(path, recs)
    assert main(["check-vectors", str(path)]) == 1
    assert "DISAGREE ed25519" in capsys.readouterr().out


def test_check_vectors_runs_aggregate_records_per_mode(tmp_path, capsys):
    path = tmp_path / "aggregate.jsonl"
    recs = list(generated_aggregate(2, seed=7))
    assert len(recs) == 2 * 8 and sum(r["expected"] for r in recs) == 4
    write_jsonl(path, recs + list(generated(1, 1, seed=2, schemes=["bls12-381"])))
    assert main(["check-vectors", str(path)]) == 0
    out = capsys.readouterr().out
    assert "bls12-381-fast-aggregate  generated" in out and "bls12-381-aggregate  generated" in out
    assert f"vectors={len(recs) + 2} agree={len(recs) + 2} disagree=0" in out
    recs[1]["expected"] = False  # a valid AggregateVerify item said to be invalid
    write_jsonl(path, recs)
    assert main(["check-vectors", str(path)]) == 1
    assert "DISAGREE bls12-381-aggregate generated id=aggregate/gen/7/0/valid" in capsys.readouterr().out


def test_selftest_command(capsys):
    assert main(["selftest", "--backend", "cpu"]) == 0
    assert "ready" in capsys.readouterr().out


def test_convert_vectors_writes_outside_the_repo(tmp_path, capsys):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if not (root.parent / "shared" / "vectors").is_dir():
        assert main(["convert-vectors", str(tmp_path)]) == 2  # says where it looked
        assert "no external vectors at" in capsys.readouterr().err
        return
    assert main(["convert-vectors", str(tmp_path)]) == 0
    lines = (tmp_path / "external.jsonl").read_text().splitlines()
    # SOURCES.md: the files app.vectors reads, P-256 ones included, + the 19 rows of BIP-340's
    # test-vectors.csv
    assert len(lines) == 2882 + 19
    assert all(json.loads(line_)["source"] for line_ in lines[:10])
    assert "external vectors" in capsys.readouterr().out


def test_convert_vectors_without_the_external_folder(tmp_path, capsys):
    """A plain clone has no ../shared/vectors: the README's line (``--generated``) writes the
    signed vectors alone, exit 0, and says why there are no external ones; without
    ``--generated`` it exits 2 saying what it needs (issue 53)."""
    absent = tmp_path / "no-vectors-here"
    assert main(["convert-vectors", str(tmp_path / "a"), "--root", str(absent)]) == 2
    err = capsys.readouterr().err
    assert f"no external vectors at {absent}" in err and "not in the repository" in err and "--generated N" in err
    assert not (tmp_path / "a").exists()
    assert main(["convert-vectors", str(tmp_path / "b"), "--root", str(absent), "--generated", "1"]) == 0
    cap = capsys.readouterr()
    assert "writing the generated vectors only" in cap.err and "generated vectors ->" in cap.out
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["generated.jsonl"]
    assert main(["check-vectors", str(tmp_path / "b" / "generated.jsonl")]) == 0


def test_a_failed_conversion_leaves_no_file(tmp_path, monkeypatch):
    import app.vectors

    def broken(root):
        yield {"scheme": "ed25519"}
        raise ModuleNotFoundError("No module named 'nacl'")

    monkeypatch.setattr(app.vectors, "convert_all", broken)
    with pytest.raises(ModuleNotFoundError):
        main(["convert-vectors", str(tmp_path), "--root", str(tmp_path)])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content, where", [
    (None, "cannot open"),
    ('{"scheme": "ed25519"}\nnot json\n', ":1: not a vector record"),
    ('\n\n{"scheme": "ed25519", "public_key": "", "message": ""\n', ":3: not JSON"),
    (b"\xff\xfe", "not UTF-8"),
], ids=["missing", "missing-field", "not-json", "not-utf8"])
def test_check_vectors_names_a_bad_file_without_a_traceback(tmp_path, capsys, content, where):
    path = tmp_path / "v.jsonl"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    assert main(["check-vectors", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zapverify: BAD_VECTOR_FILE: ") and where in err and "Traceback" not in err


# ------------------------------------------------------------------ probe
@pytest.fixture
def fresh_settings(monkeypatch):
    monkeypatch.setenv("ZAP_UMA_POOL_BYTES", str(64 << 20))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_probe_linux_without_gpu(fresh_settings, tmp_path, capsys):
    assert main(["probe", "--root", str(fh.linux(tmp_path)), "--system", "Linux", "--machine", "x86_64"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Linux, no GPU → heap"
    assert "  not uma:" in lines and "    - no RDMA HCA in /sys/class/infiniband" in lines
    assert lines[lines.index("pool") + 1].startswith("  heap, capacity ")


def test_probe_json(fresh_settings, tmp_path, capsys):
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


def test_probe_this_host(fresh_settings, capsys):
    assert main(["probe"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert " → " in first


def test_forced_transport_that_cannot_run(fresh_settings, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZAP_TRANSPORT", "gpudirect")
    get_settings.cache_clear()
    assert main(["probe", "--root", str(fh.linux(tmp_path)), "--system", "Linux"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zapverify: TRANSPORT_UNAVAILABLE: transport 'gpudirect' (ZAP_TRANSPORT) is unavailable")
    assert "no RDMA HCA in /sys/class/infiniband" in err and "libibverbs not found" in err


# ------------------------------------------------------------------ serve
@pytest.fixture
def captured_serve(monkeypatch):
    import uvicorn

    import app.cli

    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: calls.append(kw))
    monkeypatch.setattr(app.cli, "_port_in_use", lambda host, port: None)  # nothing listens: uvicorn is mocked
    for name in ("ZAPVERIFY_HOST", "ZAPVERIFY_PORT", "ZAPVERIFY_WORKERS"):
        monkeypatch.setenv(name, "")  # serve writes these; monkeypatch puts them back
    monkeypatch.delenv("ZAPVERIFY_WORKERS")
    return calls


def test_serve_with_several_workers_prepares_an_empty_metrics_dir(captured_serve, monkeypatch, tmp_path):
    import os

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")
    assert main(["serve", "--port", "8123", "--workers", "2"]) == 0
    made = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    assert captured_serve[-1]["workers"] == 2 and os.path.isdir(made) and os.listdir(made) == []
    os.rmdir(made)
    # a directory given by the environment is emptied of an earlier run's values and worker files
    (tmp_path / "counter_1.db").write_bytes(b"x")
    (tmp_path / "zapverify-workers").mkdir()
    (tmp_path / "zapverify-workers" / "1.json").write_text("{}")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setenv("ZAPVERIFY_WORKERS", "3")
    assert main(["serve"]) == 0
    assert captured_serve[-1]["workers"] == 3 and list(tmp_path.iterdir()) == []


def test_serve_with_one_worker_stays_single_process(captured_serve, monkeypatch):
    import os

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")
    assert main(["serve", "--port", "8124"]) == 0
    assert captured_serve[-1]["workers"] == 1 and os.environ["PROMETHEUS_MULTIPROC_DIR"] == ""


@pytest.mark.parametrize(("env", "said"), [
    ({"ZAPVERIFY_ADMISSION_MAX_BYTES": "100"}, "invalid setting ZAPVERIFY_ADMISSION_MAX_BYTES='100': Input should be"),
    ({"ZAPVERIFY_FAULTS": "nonsense"}, 'invalid setting: error parsing value for field "faults"'),
])
def test_a_bad_setting_is_one_line_naming_it_not_a_traceback(monkeypatch, capsys, env, said):
    from app.config import get_settings

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    assert main(["serve", "--port", "8125"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zapverify: ") and said in err and "Traceback" not in err
    get_settings.cache_clear()


def test_version_prints_the_version_and_commit(capsys):
    from app import __version__, build

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out == build.describe() and out.startswith(f"zapverify {__version__} (commit ")
    c = build.commit()
    assert c == "unknown" or (len(c) in (40, 64) and out.endswith(f"{c[:12]})"))


def test_the_build_commit_comes_from_the_environment_where_set(monkeypatch):
    from app import build

    monkeypatch.setenv(build.COMMIT_ENV, "0123456789abcdef0123456789abcdef01234567")
    build.commit.cache_clear()
    try:
        assert build.commit() == "0123456789abcdef0123456789abcdef01234567"
        assert build.describe().endswith("(commit 0123456789ab)")
    finally:
        monkeypatch.delenv(build.COMMIT_ENV)
        build.commit.cache_clear()


def test_every_option_of_every_command_has_help():
    import argparse

    from app.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [("zapverify", a.dest) for a in parser._actions
               if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and not a.help]
    for name, cmd in sub.choices.items():
        assert cmd.description or any(c.dest == name and c.help for c in sub._choices_actions), name
        missing += [(name, a.dest) for a in cmd._actions if not isinstance(a, argparse._HelpAction) and not a.help]
    assert missing == []

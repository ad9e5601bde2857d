"""The benchmark tools that explain the figures in benchmarks/RESULTS.md still run and report
every launch (they are not part of the measured targets; benchmarks/ holds those)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from delegate.runtime import Runtime

from .helpers import benchmark_module, shared_path


@pytest.fixture(scope="module")
def chain_profile():
    return benchmark_module("chain_profile")


def test_launch_names_follow_the_launches(chain_profile):
    payload = chain_profile.kernel_profile.compiled_context(shared_path("models", "small_cnn.tflite"), [])
    with Runtime.load(payload) as rt:  # one persistent kernel runs the nodes here
        assert rt.launch_names == ["input 0", f"persistent {rt.node_names[0]} .. {rt.node_names[-1]}", "output 17"]
        assert len(rt.launches()) == 3
    with Runtime.load(payload, persistent=False) as rt:
        names = rt.launch_names
        assert len(names) == len(rt.launches())
        assert names == [
            *(f"input {i}" for i in rt.input_ids),
            *rt.node_names,
            *(f"output {i}" for i in rt.output_ids),
        ]


def test_chain_profile_reports_every_launch(chain_profile, capsys):
    model = shared_path("models", "small_cnn.tflite")
    assert chain_profile.main([str(model), "--runs", "2", "--nodes"]) == 0
    out = capsys.readouterr().out
    payload = chain_profile.kernel_profile.compiled_context(model, [])
    with Runtime.load(payload, persistent=False) as rt:  # as the tool loads it (profiling: node by node)
        names = rt.launch_names
    assert out.startswith(f"small_cnn.tflite: {len(names)} launches\n")
    rows = out.split("ratio\n", 1)[1].splitlines()
    assert [row.split()[:-3] for row in rows] == [name.split() for name in names]
    for row in rows:  # chain and alone in whole microseconds, then their ratio
        chain, alone, ratio = (float(v) for v in row.split()[-3:])
        assert chain >= 0 and alone >= 0
        if alone >= 10:
            assert ratio == pytest.approx(chain / alone, abs=0.1)
    for total in ("call (host wall time, median)", "chain span (median)", "alone kernels (sum of minima)"):
        assert total in out


def test_chain_profile_refuses_no_rounds(chain_profile):
    with pytest.raises(SystemExit):
        chain_profile.main(["unused.tflite", "--runs", "0"])


@pytest.fixture(scope="module")
def persistent_profile():
    return benchmark_module("persistent_profile")


def test_persistent_profile_maps_the_persistent_launch_to_its_nodes(persistent_profile):
    launches = ["input 0", "persistent b .. d", "output 5"]
    assert persistent_profile.persistent_nodes(launches, ["a", "b", "c", "d", "e"]) == ["b", "c", "d"]
    with pytest.raises(SystemExit, match="one persistent kernel; the model runs 0"):
        persistent_profile.persistent_nodes(["input 0", "a", "output 1"], ["a"])


def _can_sample() -> bool:
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid")
    return shutil.which("perf") is not None and paranoid.exists() and int(paranoid.read_text()) <= 2


@pytest.mark.skipif(not _can_sample(), reason="needs Linux perf, allowed to sample own processes")
def test_persistent_profile_names_every_node(persistent_profile, capsys):
    model = shared_path("models", "small_cnn.tflite")
    assert persistent_profile.main([str(model), "--seconds", "1"]) == 0
    out = capsys.readouterr().out
    payload = persistent_profile.kernel_profile.compiled_context(model, [])
    with Runtime.load(payload) as rt:
        nodes = rt.node_names
    rows = [line.split()[0] for line in out.splitlines()[2 : 2 + len(nodes)]]
    assert rows == nodes
    assert "all nodes" in out

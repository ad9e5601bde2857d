"""The benchmark tools that explain the figures in benchmarks/RESULTS.md still run and report
every launch (they are not part of the measured targets; benchmarks/ holds those)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from delegate.runtime import Runtime

from .helpers import benchmark_module, shared_path


def compiled_context(model: Path) -> bytes:
    """The model's context as the benchmark tools compile it (the harness)."""
    return benchmark_module("harness.contexts").compiled_context(model, [])


@pytest.fixture(scope="module")
def chain_profile():
    return benchmark_module("chain_profile")


def test_launch_names_follow_the_launches(chain_profile):
    payload = compiled_context(shared_path("models", "small_cnn.tflite"))
    with Runtime.load(payload) as rt:  # one persistent kernel runs the conversions and the nodes here
        assert rt.launch_names == ["persistent input 0 .. output 17"]
        assert len(rt.launches()) == 1
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
    payload = compiled_context(model)
    with Runtime.load(payload, persistent=False) as rt:  # as the tool loads it (profiling: node by node)
        names = rt.launch_names
    assert out.startswith(f"small_cnn.tflite: {len(names)} launches\n")
    rows = out.split("ratio\n", 1)[1].splitlines()
    assert [row.split()[:-3] for row in rows] == [name.split() for name in names]
    for row in rows:  # chain and alone rounded to whole microseconds, their ratio (of the unrounded) to 0.01
        chain, alone, ratio = (float(v) for v in row.split()[-3:])
        assert chain >= 0 and alone >= 0
        if alone >= 10:  # the ratio must lie within what the printed roundings allow, and no further
            assert (chain - 0.5) / (alone + 0.5) - 0.005 <= ratio <= (chain + 0.5) / (alone - 0.5) + 0.005
    for total in ("call (host wall time, median)", "chain span (median)", "alone kernels (sum of minima)"):
        assert total in out


def test_chain_profile_refuses_no_rounds(chain_profile):
    with pytest.raises(SystemExit):
        chain_profile.main(["unused.tflite", "--runs", "0"])


@pytest.fixture(scope="module")
def persistent_profile():
    return benchmark_module("persistent_profile")


def test_persistent_profile_maps_the_persistent_launches_to_their_nodes(persistent_profile):
    launches = ["input 0", "persistent b .. d", "output 5"]
    assert persistent_profile.persistent_nodes(launches, ["a", "b", "c", "d", "e"]) == [["b", "c", "d"]]
    two = ["persistent a .. b", "c", "persistent d .. e"]
    assert persistent_profile.persistent_nodes(two, ["a", "b", "c", "d", "e"]) == [["a", "b"], ["d", "e"]]
    with pytest.raises(SystemExit, match="runs no persistent kernel"):
        persistent_profile.persistent_nodes(["input 0", "a", "output 1"], ["a"])


def _can_sample() -> bool:
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid")
    return shutil.which("perf") is not None and paranoid.exists() and int(paranoid.read_text()) <= 2


@pytest.mark.skipif(not _can_sample(), reason="needs Linux perf, allowed to sample own processes")
def test_persistent_profile_names_every_node(persistent_profile, capsys):
    model = shared_path("models", "small_cnn.tflite")
    assert persistent_profile.main([str(model), "--seconds", "1"]) == 0
    out = capsys.readouterr().out
    payload = compiled_context(model)
    with Runtime.load(payload) as rt:  # one persistent kernel: the conversions and every node
        nodes = rt.one_by_one_names
        assert nodes == ["input 0", *rt.node_names, "output 17"]
    lines = out.splitlines()[2 : 2 + len(nodes)]
    assert [line.split()[0] for line in lines] == [f"p0n{k}" for k in range(len(nodes))]  # the function sampled
    assert [" ".join(line.split()[1:-2]) for line in lines] == nodes
    assert "all nodes" in out


@pytest.fixture(scope="module")
def real_models():
    return benchmark_module("real_models")


def test_real_models_table(real_models):
    ok = real_models.ModelResult("real/a", 3, 4, 2e-6, delegate_ms=[1.0, 2.0, 3.0], xnnpack_ms=[4.0])
    ok.xnnpack_1thread_ms = [2.0]
    failed = real_models.ModelResult("real/b", xnnpack_ms=[5.0], notes=["delegate crashed (SIGSEGV)"])
    text = real_models.table([ok, failed], 2, single_thread=True)
    header, rule, first, second = text.splitlines()
    assert header.count("|") == rule.count("|") == first.count("|") == second.count("|") == 10
    assert "| real/a | 3/4 (75%) | 2.0e-06 | 2.00 | 4.00 | 0.50 | 2.00 | 1.00 |  |" == first
    assert second == "| real/b | - | - | - | 5.00 | - | - | - | delegate crashed (SIGSEGV) |"
    record = ok.record()
    assert record["ratio"] == 0.5 and record["ratio_to_faster_xnnpack"] == 1.0 and record["delegate_median_ms"] == 2.0
    assert "1 thread" not in real_models.table([ok], 2)


@pytest.mark.opencl
def test_real_models_measures_a_model(real_models, tmp_path, capsys):
    shared_path("models", "real", "pymicro-wakeword__okay_nabu.tflite")
    out = tmp_path / "real.json"
    args = ["--models", "pymicro-wakeword__okay_nabu", "--runs", "2", "--rounds", "1", "--json", str(out)]
    assert real_models.main(args) == 0
    (record,) = json.loads(out.read_text())
    assert record["model"] == "real/pymicro-wakeword__okay_nabu" and record["notes"] == []
    # The compute around the resource variables runs on the delegate (tests/test_variables.py).
    delegated = record["delegated_nodes"]
    assert delegated >= 20 and record["total_nodes"] > delegated and record["max_relative_error"] == 0.0
    assert len(record["delegate_ms"]) == len(record["xnnpack_ms"]) == 2 and record["ratio"] > 0
    assert f"| real/pymicro-wakeword__okay_nabu | {delegated}/" in capsys.readouterr().out


def test_compare_writes_its_report_and_chart_elsewhere_than_results_md(tmp_path, capsys):
    compare = benchmark_module("compare")
    shared_path("models", "elementwise_mix.tflite")
    committed = (compare.RESULTS.read_bytes(), compare.CHART.read_bytes())
    out = tmp_path / "out"
    argv = ["--models", "elementwise_mix", "--runs", "2", "--rounds", "1", "--no-litert", "--out", str(out)]
    assert compare.main(argv) == 0
    report = (out / "compare.md").read_text()
    assert "| elementwise_mix | delegate |" in report and "| elementwise_mix | xnnpack |" in report
    assert compare.cli.cpu_name() in report and "OpenCL device" in report  # names the machine and the device
    samples = json.loads((out / "compare.json").read_text())
    assert {s["path"] for s in samples} == {"delegate", "delegate-tuned", "xnnpack", "xnnpack-1thread"}
    assert all(s["device"] for s in samples if s["path"].startswith("delegate"))
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (compare.RESULTS.read_bytes(), compare.CHART.read_bytes()) == committed


def test_compare_covers_every_shared_folder_and_feeds_int8_models(tmp_path):
    compare = benchmark_module("compare")
    names = {m.relative_to(compare.MODELS).parent.as_posix() for m in compare.shared_models()}
    assert names == {".", "real", "quant"}
    shared_path("models", "quant", "small_cnn_int8.tflite")
    out = tmp_path / "out"
    argv = ["--models", "quant/small_cnn_int8", "--runs", "2", "--rounds", "1", "--no-litert", "--out", str(out)]
    assert compare.main(argv) == 0  # an int8 input gets int8 values (a float one would be refused)
    assert "| quant/small_cnn_int8 | delegate |" in (out / "compare.md").read_text()


def test_race_runtime_runs_the_runtime_before_the_split_beside_this_one(capsys):
    """The old runtime.py (git show) still loads over today's modules and gives the same outputs.
    Its plan launches the conversions by themselves; today's runs them in the persistent kernel."""
    if shutil.which("git") is None or not (Path(__file__).resolve().parent.parent / ".git").exists():
        pytest.skip("needs the git history (a clone, not an unpacked sdist)")
    race = benchmark_module("experiments.race_runtime")
    model = shared_path("models", "small_cnn.tflite")
    assert race.main([str(model), "--loads", "3", "--calls", "20", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    # the runtime since runs the conversions inside the persistent kernel: one launch, not three
    assert result["same_outputs"]
    assert result["launches"] == {"old": 3, "new": 1} and not result["same_plan"]


def test_persistent_race_builds_with_an_older_persistent_module_beside_this_one(capsys):
    """The persistent.py of the commit before nodes alike shared their functions still builds
    today's nodes: the same outputs, and fewer functions today where nodes are alike."""
    if shutil.which("git") is None or not (Path(__file__).resolve().parent.parent / ".git").exists():
        pytest.skip("needs the git history (a clone, not an unpacked sdist)")
    race = benchmark_module("experiments.persistent_race")
    model = shared_path("models", "elementwise_mix.tflite")
    assert race.main([str(model), "--rev", "a7d8cb5", "--calls", "20"]) == 0
    line = capsys.readouterr().out.strip()
    assert "same outputs: True" in line and line.endswith("node functions 8 -> 7")


def test_context_race_compiles_in_both_trees_and_races_in_one_process(capsys, monkeypatch):
    """Both compilers' contexts of a model are loaded at once and raced; the other tree's is
    compiled in a child process run in that tree (here this one, taken for another)."""
    race = benchmark_module("context_race")
    model = shared_path("models", "small_cnn.tflite")
    here = race.ROOT
    in_process = race.context_of(here, model, [])
    monkeypatch.setattr(race, "ROOT", here / "elsewhere")  # so that context_of takes ``here`` for another tree
    assert race.context_of(here, model, []) == in_process
    monkeypatch.setattr(race, "ROOT", here)
    assert race.main([str(model), "--base", str(here), "--blocks", "2", "--block", "2"]) == 0
    (line,) = [row for row in capsys.readouterr().out.splitlines() if row.startswith("small_cnn ")]
    assert float(line.split()[3]) > 0  # new / old


def test_xnnpack_race_reports_each_model_and_the_geometric_mean(capsys):
    race = benchmark_module("xnnpack_race")
    model = shared_path("models", "small_cnn.tflite")
    assert race.main([str(model), "--blocks", "2", "--block", "2", "--option", "cpu_when_faster=false"]) == 0
    out = capsys.readouterr().out
    (line,) = [row for row in out.splitlines() if row.startswith("small_cnn ")]
    assert line.split()[-1] == "10/10"
    assert "geometric mean of delegate / XNNPACK:" in out


def test_batch_matmul_reports_the_kernel_and_the_call(capsys):
    bench = benchmark_module("batch_matmul")
    assert bench.main(["--only", "rows 128", "--rounds", "2", "--block", "2", "--runs", "2"]) == 0
    (line,) = [row for row in capsys.readouterr().out.splitlines() if row.startswith("| rows ")]
    kernel, call, ratio = (float(line.split("|")[i]) for i in (2, 3, 5))
    assert 0 < kernel and 0 < call and ratio > 0


def test_model_kinds_check_names_the_models_over_the_ratio(capsys):
    kinds = benchmark_module("model_kinds")
    records = [{"model": "a", "ratio": {"default": 1.01}}, {"model": "b", "ratio": {"default": 1.2}}, {"model": "c"}]
    assert kinds._check(records, None) == 0
    assert kinds._check(records[:1], 1.05) == 0
    assert kinds._check(records, 1.05) == 1
    assert "b (1.20), c (-)" in capsys.readouterr().err


def test_node_race_splits_the_samples_by_library_and_node():
    race = benchmark_module("node_race")
    script = "\n".join(
        [
            "     7f00 n0 (/cache/A/dlg_persistent.so)",
            "     7f01 n0 (/cache/A/dlg_persistent.so)",
            "     7f02 n1 (/cache/A/dlg_persistent.so)",
            "     7f03 n0 (/cache/B/dlg_persistent.so)",
            "     7f04 n1 (/cache/B/dlg_persistent.so)",
            "     7f05 n1 (/cache/B/dlg_persistent.so)",
            "     7f06 dlg_wait (/cache/B/dlg_persistent.so)",
            "     7f07 memcpy (/lib/libc.so.6)",
            "not a sample line",
        ]
    )
    counts = race.samples(script)
    assert counts["/cache/A/dlg_persistent.so", "n0"] == 2 and counts["/lib/libc.so.6", "memcpy"] == 1
    result = {
        "calls": 1000, "new": ["/cache/A/dlg_persistent.so"], "old": ["/cache/B/dlg_persistent.so"],
        "launches": ["input 0", "persistent a .. b", "output 3"], "nodes": ["a", "b"],
        "old_launches": ["input 0", "persistent a .. b", "output 3"], "old_nodes": ["a", "b"],
    }  # fmt: skip
    lines = race.table(counts, result, frequency=1000)
    # 2 samples at 1000 Hz over 1000 calls: 2 us per call
    assert lines[1].split() == ["a", "2.0", "1.0", "2.000"]
    assert lines[2].split() == ["b", "1.0", "2.0", "0.500"]
    assert lines[3].split()[-3:] == ["3.0", "3.0", "1.000"]
    assert lines[4].split()[-2:] == ["0.0", "1.0"]  # the waits: samples outside the nodes
    result["old_nodes"] = ["a", "c"]
    result["old_launches"] = ["input 0", "persistent a .. c", "output 3"]
    with pytest.raises(SystemExit, match="different nodes"):
        race.table(counts, result, frequency=1000)


@pytest.mark.skipif(not _can_sample(), reason="needs Linux perf, allowed to sample own processes")
def test_node_race_races_both_trees_node_by_node(capsys):
    race = benchmark_module("node_race")
    model = shared_path("models", "small_cnn.tflite")
    # this tree against itself in F32_F16: the same nodes, other kernels
    args = [str(model), "--base", str(race.ROOT), "--base-option", "precision=F32_F16", "--seconds", "1"]
    assert race.main(args) == 0
    out = capsys.readouterr().out
    payload = compiled_context(model)
    with Runtime.load(payload) as rt:  # one persistent kernel: the conversions and every node
        nodes = rt.one_by_one_names
        assert nodes == ["input 0", *rt.node_names, "output 17"]
    rows = [" ".join(line.split()[:-3]) for line in out.splitlines()[2 : 2 + len(nodes)]]
    assert rows == nodes
    assert "all nodes" in out


def test_pitch_race_compares_padded_and_unpadded_planes(capsys):
    race = benchmark_module("experiments.pitch_race")
    model = shared_path("models", "small_cnn.tflite")
    assert race.main([str(model), "--blocks", "2", "--block", "2"]) == 0
    (line,) = [row for row in capsys.readouterr().out.splitlines() if row.startswith("small_cnn ")]
    assert float(line.split()[1]) > 0
    assert race.memory.PLANE_PAD_LINES == 3  # restored


@pytest.mark.opencl
def test_vision_regression_measures_a_set_and_writes_its_baseline(tmp_path, capsys):
    vision = benchmark_module("vision_regression")
    shutil.copy(Path(__file__).parent / "models" / "yolo_fpn_tiny.tflite", tmp_path)
    base = tmp_path / "base.json"
    args = ["--set", str(tmp_path), "--rounds", "1", "--block", "1", "--baseline", str(base)]
    assert vision.main([*args, "--update-baseline"]) == 0
    entry = json.loads(base.read_text())["models"]["yolo_fpn_tiny"]
    assert entry["default"] > 0 and entry["forced"] > 0 and entry["path"] in ("delegated", "cpu faster")
    assert "| yolo_fpn_tiny | " in capsys.readouterr().out


def test_cold_compile_judges_each_model_by_its_target(monkeypatch, tmp_path, capsys):
    cold = benchmark_module("cold_compile")
    mobilenet, densenet, other = Path("mobilenet_v2.tflite"), Path("densenet121.tflite"), Path("other.tflite")
    seconds = {mobilenet: [3.0, 5.0, 3.5], densenet: [16.0, 14.0, 20.0], other: [1.0, 1.0, 1.0]}

    def fake_start(model, invokes, options):  # a round: creation 1 s short of its cold time
        s = seconds[model].pop(0)
        run = {"import_s": 0.3, "create_s": s - 1.0, "allocate_s": 0.5, "first_invoke_s": 0.5, "steady_ms": 4.0}
        return {**run, "cold_s": cold.cold_s(run), "path": "DELEGATED", "load_before": "0", "load_after": "0"}

    monkeypatch.setattr(cold, "_start", fake_start)
    report = tmp_path / "cold.json"
    models = [str(mobilenet), str(densenet), str(other)]
    assert cold.main([*models, "--check", "--json", str(report)]) == 1  # DenseNet121's median 16 s > 15 s
    out, err = capsys.readouterr()
    assert "densenet121 (16.00 s > 15.0 s)" in err and "mobilenet_v2" not in err
    results = {r["model"]: r for r in json.loads(report.read_text())["results"]}
    assert results["mobilenet_v2"]["cold_s"] == 3.5 and results["mobilenet_v2"]["met"] is True
    assert results["mobilenet_v2"]["ratio"] == pytest.approx(3.5 / 4.0)
    assert results["mobilenet_v2"]["cold_range_s"] == [3.0, 5.0]
    assert results["other"]["met"] is None and results["other"]["target_s"] is None  # measured only
    (row,) = [line for line in out.splitlines() if line.startswith("densenet121 ")]
    assert row.split()[-2:] == ["15.0", "1.07"]
    assert "load average" in out
    seconds[densenet] = [14.0]
    assert cold.main([str(densenet), "--rounds", "1", "--check"]) == 0
    with pytest.raises(SystemExit):
        cold.main(["--rounds", "0"])

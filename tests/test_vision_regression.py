"""The vision set's regression check (harness/regression.py, vision_regression.py): no models run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import benchmark_module

regression = benchmark_module("harness.regression")

BASE = {
    "date": "2026-12-05",
    "machine": "2 cores",
    "command": "python benchmarks/vision_regression.py",
    "models": {
        "efficientnet_b0": {"default": 1.0, "forced": 1.15, "path": "cpu faster"},
        "resnet50_int8": {"default": 0.9, "forced": 0.9, "path": "delegated"},
    },
}


def _record(model: str, default: float | None, forced: float | None) -> dict:
    ratio = {k: v for k, v in (("default", default), ("forced", forced)) if v is not None}
    return {"model": model, "ratio": ratio, "notes": [], "default": {"path": "delegated"}}


@pytest.fixture
def baseline(tmp_path: Path) -> regression.Baseline:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(BASE))
    return regression.load(path)


def _failed(findings: list[regression.Finding]) -> list[str]:
    return [f"{f.model}: {f.message}" for f in findings if f.failed]


def test_the_baseline_round_trips(tmp_path, baseline):
    assert baseline.models["efficientnet_b0"]["forced"] == 1.15
    path = tmp_path / "again.json"
    path.write_text(regression.dump([_record("a", 1.01234, 1.5)], "2026-12-06", "m", "c"))
    again = regression.load(path)
    assert (again.date, again.models) == ("2026-12-06", {"a": {"default": 1.012, "forced": 1.5, "path": "delegated"}})


@pytest.mark.parametrize(
    "broken",
    [
        {"models": []},
        {**BASE, "date": None},
        {**BASE, "models": {"m": {"forced": 0}}},
        {**BASE, "models": {"m": {"default": "1"}}},
    ],
)
def test_a_broken_baseline_is_refused(tmp_path, broken):
    path = tmp_path / "base.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(ValueError):
        regression.load(path)


def test_the_same_ratios_pass(baseline):
    records = [_record("efficientnet_b0", 1.02, 1.2), _record("resnet50_int8", 0.95, 1.0)]
    assert _failed(regression.compare(records, baseline)) == []


def test_a_forced_ratio_from_1_15_to_2_2_is_a_regression(baseline):
    """A kernel twice as slow: the default went to TFLite's CPU kernels, only the forced ratio shows it."""
    records = [_record("efficientnet_b0", 1.01, 2.2), _record("resnet50_int8", 0.9, 0.9)]
    (failed,) = _failed(regression.compare(records, baseline))
    assert failed.startswith("efficientnet_b0: forced: 2.20x XNNPACK, baseline 1.15x")


def test_the_factor_sets_the_regression(baseline):
    records = [_record("efficientnet_b0", 1.0, 1.15 * 1.25), _record("resnet50_int8", 0.9, 0.9)]
    assert _failed(regression.compare(records, baseline, factor=1.3)) == []
    assert len(_failed(regression.compare(records, baseline, factor=1.2))) == 1


def test_a_default_over_the_limit_fails_even_within_the_factor(baseline):
    records = [_record("efficientnet_b0", 1.0, 1.15), _record("resnet50_int8", 1.06, 0.9)]
    assert _failed(regression.compare(records, baseline)) == [
        "resnet50_int8: default 1.06x TFLite's CPU path, over 1.05x"
    ]


def test_missing_and_failed_models_fail_and_new_ones_are_noted(baseline):
    crashed = {"model": "resnet50_int8", "notes": ["crashed (SIGSEGV)"]}
    findings = regression.compare([crashed, _record("mlp_mixer", 1.0, 1.0)], baseline)
    assert _failed(findings) == [
        "efficientnet_b0: in the baseline but not measured (is the set complete?)",
        "resnet50_int8: no default ratio measured: crashed (SIGSEGV)",
        "resnet50_int8: default: no ratio measured (baseline 0.90x)",
        "resnet50_int8: forced: no ratio measured (baseline 0.90x)",
    ]
    assert [f.model for f in findings if not f.failed] == ["mlp_mixer"]


def test_two_measurements_keep_the_lower_ratios():
    first, second = _record("a", 1.2, 1.1), _record("a", 1.0, 1.4)
    assert regression.lower(first, second)["ratio"] == {"default": 1.0, "forced": 1.1}
    assert regression.lower({"model": "a", "notes": ["crashed"]}, second)["ratio"] == {"default": 1.0, "forced": 1.4}


def test_the_median_of_runs_takes_each_ratio_apart():
    runs = [[_record("a", 1.0, 1.5)], [_record("a", 1.2, 1.1), _record("b", 1.0, 1.0)], [_record("a", 0.9, 1.3)]]
    merged = regression.median_records(runs)
    assert [(r["model"], r["ratio"], r["runs"]) for r in merged] == [
        ("a", {"default": 1.0, "forced": 1.3}, 3),
        ("b", {"default": 1.0, "forced": 1.0}, 1),
    ]


def test_a_busy_machine_shows_in_xnnpacks_thread_speedup():
    quiet = [{"latency_ms": {"xnnpack": 1.0, "xnnpack_1t": 1.8}}, {"latency_ms": {"xnnpack": 2.0, "xnnpack_1t": 3.4}}]
    busy = [{"latency_ms": {"xnnpack": 1.1, "xnnpack_1t": 1.0}}, {"notes": ["crashed"]}]
    tiny = [{"latency_ms": {"xnnpack": 0.1, "xnnpack_1t": 0.09}}]
    assert regression.thread_speedup(quiet) == pytest.approx(1.75)
    assert regression.thread_speedup(busy) == pytest.approx(1 / 1.1)
    assert regression.thread_speedup([]) is None
    assert regression.thread_speedup(tiny) is None


def test_targets_split_float_and_int8():
    records = [_record("a", 1.0, 0.8), _record("b", 1.0, 1.6), _record("c_int8", 1.0, 1.4)]
    met = dict(regression.targets(records))
    assert met == {
        "float, forced: geometric mean 1.13 (target <= 1)": False,
        "float, forced: largest 1.60 (target <= 1.5)": False,
        "int8, forced: largest 1.40 (target <= 1.5)": True,
    }


def test_check_exits_1_on_recorded_regressions(tmp_path, capsys):
    vision_regression = benchmark_module("vision_regression")

    base, records = tmp_path / "base.json", tmp_path / "records.json"
    base.write_text(json.dumps(BASE))
    records.write_text(json.dumps([_record("efficientnet_b0", 1.0, 2.2), _record("resnet50_int8", 0.9, 0.9)]))
    assert vision_regression.main(["--records", str(records), "--baseline", str(base)]) == 0
    assert vision_regression.main(["--records", str(records), "--baseline", str(base), "--check"]) == 1
    assert "REGRESSION: efficientnet_b0: forced: 2.20x" in capsys.readouterr().err
    assert vision_regression.main(["--records", str(records), "--baseline", str(base), "--update-baseline"]) == 0
    assert vision_regression.main(["--records", str(records), "--baseline", str(base), "--check"]) == 0


def test_a_busy_run_fails_the_check_and_writes_no_baseline(tmp_path):
    vision_regression = benchmark_module("vision_regression")

    base, records = tmp_path / "base.json", tmp_path / "records.json"
    base.write_text(json.dumps(BASE))
    busy = [{**_record(m, 1.0, 1.0), "latency_ms": {"xnnpack": 2.0, "xnnpack_1t": 2.1}} for m in BASE["models"]]
    records.write_text(json.dumps(busy))
    assert vision_regression.main(["--records", str(records), "--baseline", str(base)]) == 0
    assert vision_regression.main(["--records", str(records), "--baseline", str(base), "--check"]) == 1
    assert vision_regression.main(["--records", str(records), "--baseline", str(base), "--update-baseline"]) == 1
    assert json.loads(base.read_text()) == BASE

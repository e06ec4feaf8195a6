"""The fan-out benchmark's report and arguments (the benchmark itself runs in tests/integration/test_benchmarks.py)."""

from __future__ import annotations

import pytest

from benchmarks.fanout_bench import Sized, _sizes, main, report


def _sized(children: int, cpu_s: float, fan_mib: float) -> Sized:
    sized = Sized(peak_mib={"fan": fan_mib, "leaf": 60.0, "spout": 60.0})
    sized.add(children, 50.0, 120.0, {"fan": cpu_s, "leaf": 0.0, "spout": 0.0})
    return sized


def test_a_size_whose_baseline_used_no_cpu_tick_reports_its_ratio_as_not_known(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A fan-out of 100 may take less than one clock tick (10 ms) of CPU in every untracked process.
    report([100, 1000], {100: _sized(100, 0.0, 70.0), 1000: _sized(1000, 0.05, 70.0)},
           {100: _sized(100, 0.01, 75.0), 1000: _sized(1000, 0.1, 77.0)})  # fmt: skip
    out = capsys.readouterr().out
    assert "| 100 | tracked | 0.100 | 0.000 | 0.000 | 0.100 | n/a |" in out
    assert "| 1,000 | tracked | 0.100 | 0.000 | 0.000 | 0.100 | 2.00 |" in out
    assert "| 100 | tracked | 75 | 60 | 60 | 1.07 |" in out


@pytest.mark.parametrize(("flag", "value"), [("--children", "1k,10k"), ("--children", "0,100"), ("--children", ""),
                                             ("--repeat", "0")])  # fmt: skip
def test_sizes_that_are_not_positive_whole_numbers_are_refused_by_name(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([flag, value])
    assert exit_.value.code == 2
    assert flag in capsys.readouterr().err


def test_a_size_given_twice_is_measured_once() -> None:
    assert _sizes("1000,100,1000") == [100, 1000]

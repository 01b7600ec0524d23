"""Speedups carry their 95% interval into the tables: one whose interval holds 1 reads ~1x, and fast_p counts a
solution or record only where the lower bound clears p."""

import dataclasses

from harness.judge.records import Record, TimingFigures
from harness.judge.report import summary, write_files


def rec(solution, shape, speedup, ci, status="correct"):
    return Record(solution=solution, problem="p", shape=shape, status=status, speedup=speedup, speedup_ci=ci,
                  timing=TimingFigures(time_us=10.0, runs=50))


def test_fast_p_counts_lower_bounds_and_a_tie_reads_about_one(tmp_path):
    records = [rec("tie", "a", 1.02, [0.99, 1.05]), rec("tie", "b", 1.01, [0.98, 1.04]),
               rec("fast", "a", 1.30, [1.20, 1.40]), rec("fast", "b", 1.25, [1.10, 1.42]),
               rec("no_interval", "a", 1.10, None), rec("no_interval", "b", 1.10, None)]
    s = summary(records)
    assert s["solutions"]["tie"]["geomean_speedup"] > 1 and s["solutions"]["tie"]["geomean_speedup_lo"] < 1
    assert s["fast_p"]["1"] == 2 / 3  # fast, and no_interval on its point speedup; never the tie
    assert s["fast_p_records"]["1"] == 4 / 6
    assert s["fast_p"]["1.5"] == 0
    write_files(records, tmp_path, "note")
    md = (tmp_path / "summary.md").read_text()
    assert "| tie | a | correct | ~1 | [0.99, 1.05] |" in md
    assert "| fast | a | correct | 1.30 | [1.20, 1.40] |" in md
    csv = (tmp_path / "summary.csv").read_text().splitlines()
    assert "speedup_lo" in csv[0] and "speedup_hi" in csv[0]


def test_a_slower_candidate_whose_interval_clears_one_is_not_a_tie(tmp_path):
    write_files([rec("slow", "a", 0.80, [0.75, 0.85])], tmp_path, "note")
    assert "| slow | a | correct | 0.80 | [0.75, 0.85] |" in (tmp_path / "summary.md").read_text()


def test_an_unstable_speedup_has_no_point_figure_and_is_not_ranked(tmp_path):
    from harness.judge.verdict import figure_flags

    assert figure_flags(2.0, (1.5, 2.6)) == []
    assert figure_flags(2.0, (1.2, 2.6)) == ["unstable"]  # 2.0 / 1.2 > 1.5
    assert figure_flags(2.0, (1.5, 3.2)) == ["unstable"]  # 3.2 / 2.0 > 1.5
    assert figure_flags(2.0, (-0.1, 2.2)) == ["unstable"]
    assert figure_flags(2.0, None) == [] and figure_flags(None, (1.0, 9.0)) == []
    shaky = rec("shaky", "a", 3.0, [1.0, 9.0])
    shaky = dataclasses.replace(shaky, flags=figure_flags(shaky.speedup, tuple(shaky.speedup_ci)))
    records = [shaky, rec("shaky", "b", 3.0, [2.8, 3.2]), rec("steady", "a", 1.3, [1.2, 1.4])]
    s = summary(records)
    assert s["solutions"]["shaky"]["ranked"] == 1 and abs(s["solutions"]["shaky"]["geomean_speedup"] - 3.0) < 1e-9
    assert s["fast_p_records"]["2"] == 1 / 3  # shaky/b only: shaky/a's lower bound of 1.0 never counts anyway
    assert s["fast_p_records"]["0.5"] == 2 / 3  # ... and at 0.5 it is left out as unranked
    write_files(records, tmp_path, "note")
    md = (tmp_path / "summary.md").read_text()
    assert "| shaky | a | correct | ? | [1.00, 9.00] |" in md

"""Speedups carry their 95% interval into the tables: one whose interval holds 1 reads ~1x, and fast_p counts a
solution or record only where the lower bound clears p."""

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

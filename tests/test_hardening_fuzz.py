"""A short run of benchmarks/bench_fuzz.py: every reader of outside input raises only its documented
errors and answers quickly. The benchmark runs 10,000 cases per reader; this runs a few hundred."""

from __future__ import annotations

import pytest
from conftest import load_benchmark

bench_fuzz = load_benchmark("bench_fuzz")


@pytest.mark.parametrize("reader, cases", [("chat-bytes", 300), ("chat-json", 300), ("cards", 200),
                                           ("rewards", 150), ("tasks", 200),
                                           ("recordings", 200), ("conversations", 150), ("run-configs", 200)])
def test_only_documented_errors_and_no_slow_case(reader, cases):
    row = bench_fuzz.fuzz(reader, cases)
    assert row.cases == cases
    assert row.other == 0, "\n".join(row.examples)
    assert row.documented > 0  # the generators do reach the error paths
    assert row.valid + row.documented == cases
    assert row.max_s < bench_fuzz.HANG_S

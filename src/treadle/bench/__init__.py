"""Benchmarks behind ``treadle bench``: speed measured as ratios within one run, never asserted."""

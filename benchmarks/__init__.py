"""Benchmark scripts: wall times of the project's programs against a baseline."""

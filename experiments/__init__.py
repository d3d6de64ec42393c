"""Programs that reproduce the paper's experiments (absl apps, run with python -m)."""

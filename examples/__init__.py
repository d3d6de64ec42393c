"""Runnable examples of using one_shot_epe in your own training (python -m examples.NAME)."""

"""What a running job keeps and writes, the same for every engine.

`round_record` (what a round reports and the observers that receive it),
`cosine_buffer` (Algorithm 3's per-canary maxima over rounds),
`checkpoint_store` (the one checkpoint protocol), `run_directory` (a run's
files, its lock and resumption; with `run_lock`, `atomic_io` and
`write_failures`), `round_progress` (a progress bar), `training_health`
(a runaway clip or a non-finite loss: one warning, the report's notes),
`command_line` (how the programs answer bad flags), `bounded_reads` (every
file the project reads, against its kind's limit) and `interrupts` (Ctrl-C
and SIGTERM: one line, status 130, state consistent).
"""

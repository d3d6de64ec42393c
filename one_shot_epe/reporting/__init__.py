"""The privacy report: estimates, bounds and references, as JSON, text and PNG.

`report_fields` (one entry per field of a threat model's report: its label,
what it assumes, how it is computed and shown), `privacy_report` (one threat
model's estimates and bounds, Sections 4 and 5), `run_report` (the one
builder of a run's report, for every engine and `CanaryAudit`),
`run_markdown` (report.md), `run_files` (the one writer of a run's result
files), `plots` (Figures 1 to 4) and `epsilon_cli` (the command line that
reports epsilon from a CSV of canary scores).
"""

"""What a run is: the canaries, who takes part when, and the run's plan.

`canary_spec` (the canaries both engines insert and the DP round they join),
`canary_kinds` (one entry per kind of canary, gradient or data: how each is
made, inserted and scored; a run's data canaries),
`participation` (which clients and canaries take part in each round),
`run_options` (the named choices a run is made of), `tasks` (one entry per
task: its clients, d and cost, its flags' rules, and each engine's model,
data loader and accuracy metric by import path), `run_plan` (the one value an engine needs
to run: model-free settings, the mechanism, the canaries and the schedule;
and `Support`, an engine's answer to `supports(plan)`), `run_size` (a run's
memory and work, estimated and refused before any work) and `audit_checks`
(what every audit API refuses, in one wording). Engines and reports read a
run only from here.
"""

"""What a run is: the canaries, who takes part when, and the run's plan.

`canary_spec` (the canaries both engines insert and the DP round they join),
`participation` (which clients and canaries take part in each round),
`run_options` (the named choices a run is made of) and `run_plan` (the one
value an engine needs to run: model-free settings, the mechanism, the
canaries and the schedule). Engines and reports read a run only from here.
"""

"""One-shot empirical privacy estimation for DP-FedAvg (Andrew et al., ICLR 2024).

The package's folders are its layers (docs/architecture.md). The core,
framework-free (numpy, scipy, dp_accounting), is `validation` and six wings
by job, each importing only the wings below it:

  stats/: the statistics of canary scores: the exact null, the paper's
    estimates, lower bounds, one-run certificates, attack summaries.
  accounting/: each DP mechanism's epsilons and `mechanisms`, the typed
    mechanism a run plan carries, with its report rules.
  design/: what a run is: the canaries, participation, options, the plan.
  runtime/: what a running job keeps and writes: round records, the
    Algorithm 3 buffer, checkpoints, the run directory.
  reporting/: the privacy report (JSON, Markdown, figures) and the epsilon
    command line.
  data/: federated data as numpy arrays, read by every engine.

The engines stand side by side above the core and never import each other:
`tff_engine/` (TensorFlow Federated, and `tff_engine.audit.CanaryAudit` for
any tff.learning pipeline) and `jax_engine/` (JAX, for GPUs and TPUs).
The baselines of Section 5.4 (CANIFE, and DP-SGD with the TFF engine's
canaries) stand above the engines, among the programs: `experiments/baselines/`.
"""

__version__ = '0.1.0'

"""One-shot empirical privacy estimation for DP-FedAvg (Andrew et al., ICLR 2024).

The package's folders are its layers (docs/architecture.md):

  one_shot_epe/*.py: the framework-free core (numpy, scipy, dp_accounting):
    estimation, null_distribution, lower_bound, one_run, privacy_report,
    attack_metrics, accounting, tree_accounting, decorrelation (the
    estimates and bounds of Section 3; tree_accounting: DP-FTRL's tree
    aggregation; decorrelation: the all-iterates statistic under
    matrix-factorization noise);
    canary_spec, participation (which canaries, when, how); client_arrays,
    fashion_mnist (data files both engines read); run_report, plots,
    run_directory, atomic_io, run_lock, write_failures (a run's files);
    estimate, cli (command lines); gaussian_mechanism (Table 2).
  tff_engine/: DP-FedAvg with canaries in TensorFlow Federated, and
    `tff_engine.audit.CanaryAudit` for any tff.learning pipeline.
  jax_engine/: the same training in JAX, for GPUs and TPUs.
  baselines/: CANIFE and DP-SGD (Section 5.4).
"""

__version__ = '0.1.0'

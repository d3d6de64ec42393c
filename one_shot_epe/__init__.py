"""One-shot empirical privacy estimation for DP-FedAvg (Andrew et al., ICLR 2024).

Modules:
  estimation: epsilon between Gaussians and the paper's eps_est.
  null_distribution: the exact null of a canary cosine (Theorems 3.1, 3.2).
  lower_bound: eps_lo, the 1-alpha lower bound (Section 5.1).
  privacy_report: one report per threat model (eps_est, eps_lo, robust
    summaries). These four use numpy/scipy only.
  estimate: command line for reports from a CSV of cosines.
  gaussian_mechanism: exact samplers of Algorithm 1 (Table 2).
  canaries: canary directions, a pure function of (seed, id).
  canary_aggregator: the TFF aggregator: DP-FedAvg + canary injection + cosines.
  cosine_tracking: lazy, exact max-over-rounds canary cosines.
  final_model: canary cosines with the final model (Algorithm 2).
  participation: who participates each round, real clients and canaries.
  tasks: EMNIST CNN and StackOverflow LSTM tasks, real (offline) or synthetic.
  run_report, plots, atomic_io: end-of-run report, figures, safe file writes.
  runtime: lifetime of TFF's C++ execution runtime (no leaked workers).
  isolation: local TFF workers reachable only over loopback (network namespace).
  quiet: program start without TensorFlow's start-up noise.
  run_lock, write_failures: one writer per run directory; a failed write
    (a full disk) as one line naming the file.
  baselines: the CANIFE baseline (Section 5.4).
"""

__version__ = '0.1.0'

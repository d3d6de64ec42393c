"""One-shot empirical privacy estimation for DP-FedAvg (Andrew et al., ICLR 2024).

Modules:
  estimation: epsilon estimates and lower bounds from canary cosines (no TF).
  runtime: lifetime of TFF's C++ execution runtime (no leaked worker processes).
"""

__version__ = '0.1.0'

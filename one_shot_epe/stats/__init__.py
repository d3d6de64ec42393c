"""The statistics of Sections 3 and 5: estimates and bounds from canary scores.

Given canary scores (cosines with the final model, or per-canary maxima over
rounds), these modules say how much the scores imply about epsilon, with
numpy and scipy only: the exact null of a cosine (`null_distribution`,
Theorems 3.1 and 3.2), epsilon between Gaussians and the paper's estimates
(`estimation`, Section 3.2, on the hockey-stick divergence of
`hockey_stick`), thresholded lower bounds (`lower_bound`,
Section 5.1), one-run certificates (`one_run`), the tight one-run bounds
of Xiang et al. (`tight_audit`), jax-privacy's repeated-split threshold
choice (`multi_split`), BCa bootstrap quantiles (`bca_bootstrap`) and
one-sided mu-GDP bound from threshold tests (`gdp_threshold`), the
Gaussian-pair bound on the fitted pair's mean shift (`gaussian_pair`), attack
summaries (`attack_metrics`), the decorrelated all-iterates score under
matrix-factorization noise (`decorrelation`) and the simulation of
Algorithm 1 behind Table 2 (`gaussian_simulation`). Nothing here knows
about runs, files or engines.
"""

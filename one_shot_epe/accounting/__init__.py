"""The mechanisms' epsilons: what the analysis promises for each DP mechanism.

The references that sit beside the estimates: the analytical epsilon of a
canary and the accounted epsilon of a real client for DP-FedAvg's Gaussian
noise (`dp_fedavg`, with dp_accounting), DP-FTRL's tree aggregation
(`tree_aggregation`) and distributed DP over secure aggregation
(`distributed_dp`), the final model's Gaussian under matrix-factorization
noise (`correlated_final_model`) and under server momentum
(`last_iterate`), and `mechanisms`, the typed mechanism a run plan carries,
each with its own rules for the report.
"""

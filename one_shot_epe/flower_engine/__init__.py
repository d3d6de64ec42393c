"""The Flower engine: canaries in Flower's DP-FedAvg (`flwr` 1.42).

Flower (`flwr.serverapp.strategy`) noises FedAvg with its DP
wrappers; `audit.CanaryAudit` inserts the canaries of Andrew et al. (ICLR
2024) inside that noise and writes the project's run directory and privacy
report; `canary_nodes.DataCanaryAudit` audits with data canaries instead,
canary clients that are ordinary nodes of the federation, with no strategy
wrapper. The only folder of the package that imports Flower.
"""

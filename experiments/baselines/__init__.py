"""Baselines that the one-shot estimator is compared with (Section 5.4).

They stand above the engines, among the programs: `dpsgd` inserts and tracks
the TFF engine's canaries (`one_shot_epe.tff_engine.canaries`,
`cosine_tracking`, `final_model`), so its runs use the very canaries of a TFF
run with the same seed and d.

Fashion-MNIST, which the comparison trains on, is read by the core's
`one_shot_epe.data.fashion_mnist`.

Modules:
  feedforward: the two-layer feed-forward classifier of Section 5.4, with its
    parameters held as one flat vector (the space canaries live in).
  per_example: per-example gradients and their clipping in that flat space.
  canife_design: CANIFE's canary design (Maddock et al. 2022, Sec. 3.3,
    Algorithm 1 lines 1-8) and canary health (Sec. 4.2).
  canife_attack: CANIFE's mock-round attack and per-round epsilon (Sec. 3.4).
  canife_accounting: CANIFE's per-round noise estimate and its RDP composition
    over training (Sec. 3.4, Appendix C, Algorithm 2).
  canife: one CANIFE audit of a frozen model, end to end (Algorithm 1).
  dpsgd: DP-SGD with one-example clients (DP-FedSGD) in plain TensorFlow, with
    the one-shot method's canaries inserted and tracked (Andrew et al.,
    Algorithms 2 and 3) and a hook for audits at frozen models.
"""

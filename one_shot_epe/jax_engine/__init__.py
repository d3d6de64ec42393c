"""A TensorFlow-free JAX engine for DP-FedAvg with canaries.

The TFF path cannot run client training on an accelerator; this package holds
the same experiment written in JAX, so it runs on GPUs/TPUs and in
environments without TensorFlow. Nothing here may import TensorFlow or
TensorFlow Federated, nor the TFF engine (tests/one_shot_epe_test.py checks
it).

Modules:
  support: which plans the engine runs (`supports(plan)`; framework-free).
  mechanism_noise: each mechanism's noise on the engine, one entry per
    mechanism it runs (its rows and strategy; framework-free).
  compat: the few JAX calls whose spelling differs between jax 0.4.14 (this
    project's .venv, pinned by TFF) and the newest jax.
  models: the EMNIST `cnn_dropout` CNN and the StackOverflow word LSTM of
    TFF's baselines as pure functions, with Keras-equivalent initialisation and
    a converter from Keras weights.
  data: on-disk client arrays, numpy synthetic data, and the padded/masked
    per-round client batches (TFF's client preprocessing).
  optimizers: TFF's sgd / sgdm / adam update rules on pytrees.
  packing: first-fit-decreasing lanes of a round's clients for 'vmap', and
    a run's layout (lanes and micro-batch size).
  packed_batches: a round's batches (or their rows) laid out in those lanes.
  fedavg: one DP-FedAvg round (Andrew et al., ICLR 2024, Algorithm 2) as
    pure jit-able functions: clients vmapped, or packed into lanes.
  client_training: a client's local training in that round (local steps,
    micro-batches, its clipped update) as pure jit-able functions.
  round_engine: `RoundEngine`, the round compiled per platform (chosen in
    one place): clients and a program's runs one by one ('loop', CPU) or
    vmapped and sharded over all local devices ('vmap', accelerators).
  lane_layouts: the lanes of each 'vmap' round: the fixed layout, a
    compiled one its clients fit, or a new one.
  loop_rounds: the 'loop' strategy's jitted steps, folds and server step.
  canaries: canary directions drawn by `jax.random` and their cosines with a
    block of buffered rounds' vectors (Algorithm 3, lines 10-16).
  checkpoints: one .npz file per checkpointed round.
  correlated_noise: DP-FTRL's correlated matrix-factorization noise (BLT
    and banded strategies from jax-privacy), its sensitivity, streaming
    privatizer and accounted eps; needs jax-privacy.
  tree_noise: DP-FTRL's tree-aggregation noise (one tree over the run, TFF's
    efficient estimator by default) as the rounds' noise rows.
  training: a whole resumable run with canaries (or a program of R runs),
    the launcher's `--backend=jax`; data canaries as clients and their
    losses (`canary_losses`), scored on every round's model.
  run_loop: the host side of one run: its state, resume point, canaries,
    block-scored cosines and checkpoints.
  run_stats: what a run cost the device (compiles, padding, uploads).
  memory: the device memory a run needs, estimated before it starts.
"""

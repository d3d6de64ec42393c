"""The TensorFlow Federated engine: everything in the package that imports TF.

DP-FedAvg with canaries as a TFF aggregator, the cosine tracker's TensorFlow
side, the plug-in `CanaryAudit`, TFF's C++ runtime and its workers, and the
tasks (EMNIST CNN, StackOverflow LSTM, Fashion-MNIST demo) read from TFF's
SQLite files. It shares the framework-free core (`one_shot_epe.*`) with the JAX
engine and never imports it (tests/one_shot_epe_test.py).

Modules:
  support: which plans the engine runs (`supports(plan)`; framework-free).
  mechanism_noise: each mechanism's noise on the engine, one entry per
    mechanism it runs (its factory's builder; framework-free).
  canaries: canary directions in TensorFlow, a pure function of (seed, id).
  seeded_queries: tensorflow-privacy's Gaussian queries with seeded noise.
  canary_aggregator: the TFF aggregator: DP-FedAvg + canary injection.
  canary_records: a round's canary records at the server (Proj(c; S_t)).
  aggregator_state: the canary aggregators' state, DP event, measurements
    and value types.
  dp_queries: the canary aggregator's tensorflow_privacy DP queries.
  distributed_dp_aggregator: distributed DP (secure sum of the clients'
    noise shares) + canary injection.
  cosine_tracking: the blocks of buffered rounds scored in TensorFlow and
    folded into `runtime.cosine_buffer` (exact max-over-rounds cosines).
  final_model: canary cosines with the final model (Algorithm 2).
  canary_clients: data canaries as clients: their datasets in the task's
    structure, the rounds they join, their losses on a model.
  audit: `CanaryAudit`, canaries for any `tff.learning` pipeline: its
    factories and its report.
  audit_plan: `CanaryAudit`'s canary plan, made from its arguments or
    checked.
  audit_factories: the DP aggregation one `CanaryAudit` audits, and the
    factories that build it.
  canary_observer: what `CanaryAudit` observes of each learning state.
  audit_state_manager: `CanaryAudit` inside TFF's training loops.
  checkpoints: TFF program-state checkpoints (`runtime.checkpoint_store`).
  training: a whole resumable run on `tff.simulation`, the launcher's
    `--backend=tff`.
  loop_managers: the release and program state managers `training` hands
    TFF's loop (round records, cosines, checkpoints announced and kept).
  runtime: TFF's C++ runtime in this process, with no leaked workers.
  tff_workers: TFF's C++ worker processes, started and stopped.
  distributed_runtime: a round's clients spread over many workers.
  isolation: each local worker alone in a loopback-only network namespace
    (the mode, the program's check, the server's bridge from the caller).
  network_namespace: entering and reading a loopback-only network namespace.
  namespace_bridge: the child processes that enter one (bridge and probe).
  exposure: the TCP sockets a process listens on, and which are exposed.
  accelerators: the device of the launcher's canary work.
  quiet: program start without TensorFlow's start-up noise.
  tasks: EMNIST, StackOverflow, Fashion-MNIST and synthetic stand-ins.
"""

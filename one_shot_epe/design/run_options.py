"""The choices a run is made of, shared by both engines (framework-free).

The launcher's flags (`experiments.train_config`) are checked against these
names without importing TensorFlow, so the JAX engine (`--backend=jax`) runs
the same flags on machines without it; the modules that implement each
choice take their names from here.
"""

from one_shot_epe.design import tasks

__all__ = ['ACCELERATORS', 'BACKENDS', 'CANARY_CLIPS', 'COMPRESSIONS',
           'OPTIMIZERS', 'OPTIMIZER_SLOTS', 'TASK_NAMES', 'UNSEEN_ID_OFFSET']

# Training engines: TensorFlow Federated (CPU), or the JAX engine
# (one_shot_epe/jax_engine; GPU, TPU, or CPU).
BACKENDS = ('tff', 'jax')
# The tasks of Section 5, the demo's, and Shakespeare by speaking role: one
# entry each (`design.tasks`).
TASK_NAMES = tasks.task_names()
# How an inserted canary meets the clip S_t (one_shot_epe/tff_engine/canary_aggregator).
CANARY_CLIPS = ('project', 'clip')
# Client and server optimizers (TFF's sgd, momentum sgd, adam), each with
# its slots: the d-sized float32 vectors it keeps in the training state.
OPTIMIZER_SLOTS = {'sgd': 0, 'sgdm': 1, 'adam': 2}
OPTIMIZERS = tuple(OPTIMIZER_SLOTS)
# Device of the TFF launcher's canary work (one_shot_epe/tff_engine/accelerators).
ACCELERATORS = ('cpu', 'gpu')
# Compression of the clients' updates before aggregation: none, or the random
# rotation and discretization to integers modulo 2^b of secure aggregation
# (which distributed DP always applies, and only it: `accounting.mechanisms`).
COMPRESSIONS = ('none', 'rotation_discretization')
# Unseen canary i has id UNSEEN_ID_OFFSET + i; seen ids are 0..k-1.
UNSEEN_ID_OFFSET = 1_000_000_000

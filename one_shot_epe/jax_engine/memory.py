"""How much device memory a run of the JAX engine needs, before it starts.

`device_memory` estimates, from shapes only, what `training.train` (or a
program of R runs, `training.train_program`) holds on each local device;
`device_memory_limit` says what a device can hold. The launcher refuses a
run that does not fit (`experiments.backend_jax.check_device_memory`).
"""

import dataclasses
import os
from typing import Any

import jax
import numpy as np

from one_shot_epe.data import client_arrays
from one_shot_epe.jax_engine import data
from one_shot_epe.jax_engine import round_engine
from one_shot_epe.design import run_plan

__all__ = ['DeviceMemory', 'device_memory', 'device_memory_limit']


@dataclasses.dataclass(frozen=True)
class DeviceMemory:
  """What a run holds on each device at once, estimated before it starts.

  Attributes:
    data_bytes: the resident split (`RoundEngine.upload`), or a round's
      host-fed batches (every slot at the largest client's batches).
    state_bytes: the server's model, optimizer slots and first model, and a
      block of `canary_spec.CanarySpec.buffer_rounds_for` round vectors.
    lane_bytes: one lane's local training: the model, the client optimizer's
      slots, the gradient, the update and the lane's clipped sum, plus every
      intermediate value of one local step (the sizes in its jaxpr: an upper
      bound on its activations, whatever the backend).
    lanes: the lanes on one device (at most one client per lane).
    resident: whether the split is resident ('vmap' with resident data).
    runs: the runs of the program (`training.train_program`), each with its
      own state, lanes and host-fed batches; a resident split is shared.
  """
  data_bytes: int
  state_bytes: int
  lane_bytes: int
  lanes: int
  resident: bool
  runs: int = 1

  @property
  def total_bytes(self) -> int:
    """The estimate: data + runs x (state + lanes x lane)."""
    data_bytes = self.data_bytes * (1 if self.resident else self.runs)
    return data_bytes + self.runs * (self.state_bytes +
                                     self.lanes * self.lane_bytes)


def _values_bytes(jaxpr: Any) -> int:
  """Bytes of every value an equation of `jaxpr` outputs (no sub-jaxprs)."""
  return sum(int(np.prod(var.aval.shape)) * var.aval.dtype.itemsize
             for eqn in jaxpr.eqns for var in eqn.outvars
             if hasattr(var.aval, 'shape'))


def device_memory(plan: run_plan.RunPlan, model: Any,
                  train_data: client_arrays.ClientArrays, *,
                  local_training: str = 'auto',
                  resident_data: bool = True, runs: int = 1) -> DeviceMemory:
  """The device memory `training.train` needs on each local device.

  Computed from shapes only (nothing is compiled or uploaded): the split's
  bytes, d = the model's parameters, the run's largest cohort spread over
  `jax.local_devices()` ('loop': one device, one lane) and the jaxpr of one
  local step on a batch of the plan's batch size.

  Args:
    plan: the run.
    model: its model (init, loss).
    train_data: the training clients.
    local_training: `round_engine.RoundEngine`'s strategy ('auto': the
      platform's, `round_engine.default_local_training`).
    resident_data: as `training.train`'s.
    runs: > 1: a program of that many runs like `plan`
      (`training.train_program`).

  Returns:
    The estimate, `DeviceMemory`.
  """
  if local_training == 'auto':
    local_training = round_engine.default_local_training()
  devices = 1 if local_training == 'loop' else len(jax.local_devices())
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0))
  dim = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(params))
  sample = {name: array[:1] for name, array in train_data.features.items()}
  example = sum(int(a.nbytes) for a in client_arrays.model_inputs(train_data.kind,
                                                         sample))
  sizes = data.examples_used(train_data, epochs=plan.epochs,
                             max_examples=plan.max_examples)
  largest = data.max_batches_for(int(sizes.max(initial=1)), plan.batch_size)
  cohort = max(len(plan.sampler.indices(t)) for t in range(plan.total_rounds))
  lanes = 1 if local_training == 'loop' else -(-max(cohort, 1) // devices)
  resident = local_training == 'vmap' and resident_data
  if resident:
    data_bytes = example * int(train_data.offsets[-1])
  else:
    data_bytes = example * lanes * largest * plan.batch_size
  spec = plan.spec
  buffer = (spec.buffer_rounds_for(dim, plan.rounds_per_checkpoint)
            if spec is not None else 0)
  state_bytes = 4 * dim * (2 + plan.server_optimizer.slots + buffer)
  batch = {name: np.zeros((plan.batch_size,) + a.shape[1:], a.dtype)
           for name, a in sample.items()}
  inputs, labels = client_arrays.model_inputs(train_data.kind, batch)
  step = jax.make_jaxpr(jax.grad(model.loss))(
      params, inputs, labels, np.ones(plan.batch_size, np.float32),
      jax.random.PRNGKey(0))
  lane_bytes = (4 * dim * (4 + plan.client_optimizer.slots) +
                _values_bytes(step.jaxpr))
  return DeviceMemory(data_bytes=data_bytes, state_bytes=state_bytes,
                      lane_bytes=lane_bytes, lanes=lanes, resident=resident,
                      runs=runs)


def device_memory_limit() -> int | None:
  """Bytes a local device can hold: XLA's limit, or free host RAM on a CPU.

  Returns:
    The bytes, or None where neither is known.
  """
  stats = jax.local_devices()[0].memory_stats() or {}
  if 'bytes_limit' in stats:
    return int(stats['bytes_limit'])
  if jax.default_backend() == 'cpu':
    try:
      return os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
    except (ValueError, OSError):
      return None
  return None

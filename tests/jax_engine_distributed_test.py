"""The JAX engine on every local device, and under `jax.distributed`.

Independent truth: the same run in one process on one CPU device, which
trains its clients one at a time ('loop'). The same run with 'vmap' local
training and the split resident on the devices, its client lanes sharded
over the mesh of `jax.devices()`, must give the same final-model cosines,
canary maxima, accuracy and per-round metrics (clip, aggregate norm, clients,
canaries; to float32 summation order) on

* one process with four CPU devices (XLA_FLAGS'
  --xla_force_host_platform_device_count), and
* two processes on this machine with two CPU devices each, a loopback
  coordinator and gloo collectives: the mesh then spans both processes, as
  on several hosts. Needs a jax with CPU collectives (the JAX environment's,
  jax >= 0.4.27).
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))

_RUN = textwrap.dedent('''
    import json, sys, tempfile
    import jax
    process, processes, port, devices = (int(a) for a in sys.argv[2:6])
    local_training = sys.argv[6]
    if processes > 1:
      jax.config.update('jax_cpu_collectives_implementation', 'gloo')
      jax.distributed.initialize(coordinator_address=f'127.0.0.1:{port}',
                                 num_processes=processes,
                                 process_id=process)
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from one_shot_epe.design import canary_spec
    from one_shot_epe.data import client_arrays
    from one_shot_epe.design import participation
    from one_shot_epe.runtime import round_record
    from one_shot_epe.design import run_plan
    from one_shot_epe.jax_engine import checkpoints, models, run_stats, training
    arrays = client_arrays.synthetic_emnist(8, 6, seed=2, sizes='realistic')
    arrays = client_arrays.ClientArrays(
        kind='emnist', client_ids=arrays.client_ids, offsets=arrays.offsets,
        features={'pixels': arrays.features['pixels'][:, :8, :8],
                  'label': arrays.features['label'] % 5})
    spec = canary_spec.CanarySpec(seed=3, num_seen=4, num_unseen=4,
                                  schedule=[[0, 1], [2], [3]])
    plan = run_plan.RunPlan(
        sampler=participation.ShuffledEpochs(8, 4, seed=1), spec=spec,
        dp=canary_spec.DPAggregation(noise_multiplier=0.3,
                                     clients_per_round=4.5),
        delta=1e-3, client_optimizer=run_plan.OptimizerSpec('sgd', 0.1),
        server_optimizer=run_plan.OptimizerSpec('adam', 0.01),
        batch_size=2, epochs=1, max_examples=None, total_rounds=3, seed=4,
        noise_seed=None, rounds_per_checkpoint=2)
    model = models.EmnistCnn(conv1_filters=2, conv2_filters=2,
                             dense_units=4, num_classes=5, image_size=8)
    assert len(jax.devices()) == processes * devices, jax.devices()

    class Metrics:
      def __init__(self):
        self.rounds = []
      def on_round(self, record):
        if record.round_num:  # Round 0: the initial evaluation only.
          self.rounds.append(record.metrics)
      def on_cosines(self, cosines):
        pass
      def on_checkpoint(self, round_num):
        pass

    metrics, stats = Metrics(), run_stats.RunStats()
    with tempfile.TemporaryDirectory() as directory:
      outcome = training.train(plan, model, arrays, arrays,
                               checkpoints.TrainingStateCheckpoints(directory), metrics,
                               local_training=local_training, stats=stats)
    print('RESULT', json.dumps({
        'processes': jax.process_count(),
        'devices': len(jax.devices()),
        'resident_bytes': stats.resident_bytes,
        'metrics': [[m[name] for name in ('clip', 'aggregate_norm',
                                          'num_clients', 'canaries_inserted')]
                    for m in metrics.rounds],
        'final': outcome.final_cosines.tolist(),
        'unseen_final': outcome.final_unseen_cosines.tolist(),
        'seen': outcome.seen_maxima.tolist(),
        'unseen': outcome.unseen_maxima.tolist(),
        'accuracy': outcome.accuracy}))
''')


def _free_port() -> int:
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    return probe.getsockname()[1]


def _result(stdout: str) -> dict:
  line = [l for l in stdout.splitlines() if l.startswith('RESULT ')][-1]
  return json.loads(line[len('RESULT '):])


def _env(devices: int) -> dict[str, str]:
  return dict(os.environ, JAX_PLATFORMS='cpu', XLA_FLAGS=(
      f'--xla_force_host_platform_device_count={devices}'))


def _one_process(devices: int, local_training: str) -> dict:
  done = subprocess.run(
      [sys.executable, '-c', _RUN, REPO, '0', '1', '0', str(devices),
       local_training], capture_output=True, text=True, timeout=600,
      check=False, env=_env(devices))
  assert done.returncode == 0, done.stderr[-3000:]
  return _result(done.stdout)


@pytest.fixture(scope='module', name='reference')
def fixture_reference():
  reference = _one_process(1, 'loop')
  assert (reference['processes'], reference['devices']) == (1, 1)
  assert reference['resident_bytes'] == 0  # 'loop' reads host batches.
  return reference


def _assert_same_run(got: dict, reference: dict) -> None:
  for key in ('final', 'unseen_final', 'seen', 'unseen'):
    np.testing.assert_allclose(got[key], reference[key], rtol=1e-4,
                               atol=1e-6)
  np.testing.assert_allclose(got['metrics'], reference['metrics'], rtol=1e-4,
                             atol=1e-6)
  assert got['accuracy'] == pytest.approx(reference['accuracy'])
  assert got['resident_bytes'] > 0


@pytest.mark.slow
def test_four_local_devices_give_the_one_device_run(reference):
  got = _one_process(4, 'vmap')
  assert (got['processes'], got['devices']) == (1, 4)
  _assert_same_run(got, reference)


@pytest.mark.slow
def test_two_processes_of_two_devices_give_the_one_device_run(reference):
  jax = pytest.importorskip('jax')
  if 'jax_cpu_collectives_implementation' not in jax.config.values:
    pytest.skip(f'jax {jax.__version__} has no CPU collectives (make test-jax '
                'runs this with the JAX environment\'s jax)')
  port = str(_free_port())
  workers = [subprocess.Popen(
      [sys.executable, '-c', _RUN, REPO, str(i), '2', port, '2', 'auto'],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(2))
             for i in range(2)]
  outputs = [worker.communicate(timeout=600) for worker in workers]
  for worker, (_, stderr) in zip(workers, outputs):
    assert worker.returncode == 0, stderr[-3000:]
  for stdout, _ in outputs:
    got = _result(stdout)
    assert (got['processes'], got['devices']) == (2, 4)
    _assert_same_run(got, reference)

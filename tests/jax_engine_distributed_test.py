"""The JAX engine as two processes under `jax.distributed`, as on several hosts.

Independent truth: the same run in one process. Two processes on this
machine, one CPU device each, a loopback coordinator and gloo collectives,
share the client axis of every round ('vmap' local training over the mesh of
`jax.devices()`, which then spans both processes); one process on one CPU
device runs the same rounds its own way ('loop'). Both must give the same
final-model cosines, canary maxima and accuracy (to float32 summation
order).
Needs a jax with CPU collectives (the JAX environment's, jax >= 0.4.27).
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
    process, processes, port = (int(a) for a in sys.argv[2:5])
    if processes > 1:
      jax.config.update('jax_cpu_collectives_implementation', 'gloo')
      jax.distributed.initialize(coordinator_address=f'127.0.0.1:{port}',
                                 num_processes=processes,
                                 process_id=process)
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from one_shot_epe import canary_spec, client_arrays, participation
    from one_shot_epe import run_plan
    from one_shot_epe.jax_engine import checkpoints, models, training
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
    assert len(jax.devices()) == processes, jax.devices()
    with tempfile.TemporaryDirectory() as directory:
      outcome = training.train(plan, model, arrays, arrays,
                               checkpoints.NpzCheckpoints(directory))
    print('RESULT', json.dumps({
        'processes': jax.process_count(),
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


def test_two_processes_give_the_one_process_run():
  jax = pytest.importorskip('jax')
  if 'jax_cpu_collectives_implementation' not in jax.config.values:
    pytest.skip(f'jax {jax.__version__} has no CPU collectives (make test-jax '
                'runs this with the JAX environment\'s jax)')
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  one = subprocess.run(
      [sys.executable, '-c', _RUN, REPO, '0', '1', '0'], capture_output=True,
      text=True, timeout=600, check=False, env=env)
  assert one.returncode == 0, one.stderr[-3000:]
  port = str(_free_port())
  workers = [subprocess.Popen(
      [sys.executable, '-c', _RUN, REPO, str(i), '2', port],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(2)]
  outputs = [worker.communicate(timeout=600) for worker in workers]
  for worker, (_, stderr) in zip(workers, outputs):
    assert worker.returncode == 0, stderr[-3000:]
  reference = _result(one.stdout)
  assert reference['processes'] == 1
  for stdout, _ in outputs:
    got = _result(stdout)
    assert got['processes'] == 2
    for key in ('final', 'unseen_final', 'seen', 'unseen'):
      np.testing.assert_allclose(got[key], reference[key], rtol=1e-4,
                                 atol=1e-6)
    assert got['accuracy'] == pytest.approx(reference['accuracy'])

"""Data canaries on the JAX engine, through `experiments.train`.

Independent truths: the canary schedule (each seen data canary joins its
rounds as one more client, the server inserts nothing); the truth eps = 0
at overwhelming noise (no bound may claim anything); memorization without
noise (seen canaries' losses below the unseen ones'); the canaries' bytes,
pinned by the digests the TFF engine's test pins too
(`pinned_canaries.py`), so both engines train and score the
same examples.
"""

import csv
import json
import os

import numpy as np
import pytest

from experiments import run_planning
from experiments import train
from experiments import train_config
from one_shot_epe.data import canary_examples
from one_shot_epe.jax_engine import data
from one_shot_epe.runtime import run_directory
import pinned_canaries



def _config(root, **overrides) -> train_config.TrainConfig:
  settings = dict(backend='jax', task='emnist_character',
                  use_synthetic_data=True, synthetic_num_clients=12,
                  synthetic_examples_per_client=8, clients_per_round=3,
                  total_rounds=4, client_batch_size=4, num_canaries=4,
                  num_unseen_canaries=16, canary_repeats=2,
                  canary_kind='data', data_canary_examples=4,
                  clipping_norm=1.0, noise_multiplier=1000.0,
                  rounds_per_checkpoint=2, rounds_per_evaluation=2,
                  max_eval_examples=16, progress_bar=False,
                  root_output_dir=str(root), run_name='run')
  settings.update(overrides)
  return train_config.TrainConfig(**settings)


def test_the_engine_feeds_the_pinned_canary_examples():
  images = canary_examples.canary_arrays(0, [0, 10**9], 'emnist', 4,
                                         num_labels=62)
  first = canary_examples.select_clients(images, 1)
  assert pinned_canaries.digest(*data.model_inputs(
      'emnist', first.features)) == pinned_canaries.EMNIST_DIGEST
  text = canary_examples.canary_arrays(0, [0], 'stackoverflow', 3,
                                       vocab_size=100)
  assert pinned_canaries.digest(*data.model_inputs(
      'stackoverflow', text.features)) == pinned_canaries.TEXT_DIGEST


def test_data_canaries_under_overwhelming_noise_claim_nothing(tmp_path):
  config = _config(tmp_path)
  result = train.run_training(config)
  run_dir = os.path.join(tmp_path, 'run')
  with open(os.path.join(run_dir, run_directory.REPORT_JSON_FILE)) as f:
    report = json.load(f)
  assert report['canary_kind'] == 'data'
  assert report['final']['canary_kind'] == 'data'
  assert report['epsilon_lo_final'] == 0.0
  assert report['epsilon_one_run_final'] == 0.0
  assert report['epsilon_lo_tight_any_final'] == 0.0
  assert report['all_iterates'] is None
  assert report['epsilon_lo_gauss_pair_final'] is None
  assert report['setting']['data_canary_examples'] == 4
  # The gradient canaries were not inserted: no cosine files, no plot.
  for name in (run_directory.FINAL_COSINES_FILE,
               run_directory.MAX_COSINES_FILE,
               run_directory.DENSITY_PLOT_FILE):
    assert not os.path.exists(os.path.join(run_dir, name)), name
  with open(os.path.join(run_dir,
                         run_directory.DATA_CANARY_LOSSES_FILE)) as f:
    rows = list(csv.DictReader(f))
  assert len([r for r in rows if r['seen']]) == 4 and len(rows) == 16
  np.testing.assert_array_equal(
      [float(r['seen']) for r in rows if r['seen']],
      result.outcome.data_seen_losses)
  np.testing.assert_array_equal([float(r['unseen']) for r in rows],
                                result.outcome.data_unseen_losses)
  # Each seen data canary joined its rounds as a client; the server
  # inserted no gradient canary.
  prepared = train.prepare(config)
  plan = prepared.plan
  with open(os.path.join(run_dir, run_directory.METRICS_FILE)) as f:
    metrics = [row for row in csv.DictReader(f) if row['round'] != '0']
  for t, row in enumerate(metrics):
    assert int(row['canaries_inserted']) == 0
    assert int(row['num_clients']) == (len(plan.sampler.indices(t)) +
                                       len(plan.data_canaries.schedule[t]))
  assert sum(len(ids) for ids in plan.data_canaries.schedule) == 4 * 2
  arrays = run_planning.data_canary_arrays(config, plan)
  assert arrays.num_clients == 20


@pytest.mark.slow
def test_data_canaries_are_memorized_without_noise(tmp_path):
  result = train.run_training(_config(
      tmp_path, noise_multiplier=0.0, clipping_norm=100.0,
      client_epochs_per_round=20, client_learning_rate=0.1))
  seen = result.outcome.data_seen_losses
  unseen = result.outcome.data_unseen_losses
  assert seen.max() < np.median(unseen), (seen, unseen)

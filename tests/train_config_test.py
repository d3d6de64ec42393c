"""Tests of experiments/train_config.py: flag checks and the shipped configs.

Every bad flag (or flag combination, or flag that does not fit the task's
data) raises `ConfigError` naming it, from `train.run_training`, before
anything is written. The flagfiles in configs/ parse through `define_flags`
and `config_from_flags` into the settings of the paper's Tables 3 and 4.
"""

import importlib.util
import os
import subprocess
import sys

from absl import flags
import dp_accounting
import pytest
import tensorflow as tf

from experiments import grid
from experiments import train
from experiments import train_config
from experiments import train_flags
from one_shot_epe.data import shakespeare
from one_shot_epe.design import canary_spec
import programs
import tiny_run

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# (flag overrides, the flag the error must name). Checked before anything is
# written; the data-dependent ones need the task's data.
_BAD_CONFIGS = [
    (dict(task='mnist'), '--task'),
    (dict(client_optimizer='rmsprop'), '--client_optimizer'),
    (dict(server_optimizer='lamb'), '--server_optimizer'),
    (dict(sampling='uniform'), '--sampling'),
    (dict(final_model_statistic='initial'), '--final_model_statistic'),
    (dict(all_iterates_statistic='final'),
     r"--all_iterates_statistic must be one of \['aggregate', 'model_delta'\]"),
    (dict(all_iterates_statistic=None), '--all_iterates_statistic'),
    (dict(canary_clip='scale'),
     r"--canary_clip must be one of \['project', 'clip'\]; got 'scale'"),
    (dict(data_canary_text='markov'), '--data_canary_text'),
    (dict(data_canary_temperature=0.5), '--data_canary_temperature'),
    (dict(client_learning_rate=0.0), '--client_learning_rate'),
    (dict(server_learning_rate=float('nan')), '--server_learning_rate'),
    (dict(server_momentum=1.0), '--server_momentum'),
    (dict(client_batch_size=0), '--client_batch_size'),
    (dict(client_batch_size=1.5), '--client_batch_size'),
    (dict(clients_per_round=True), '--clients_per_round'),
    (dict(max_examples_per_client=0), '--max_examples_per_client'),
    (dict(noise_multiplier=-0.1), '--noise_multiplier'),
    (dict(noise_multiplier=float('inf')), '--noise_multiplier'),
    (dict(clipping_norm=-1.0), '--clipping_norm'),
    (dict(target_unclipped_quantile=1.0), '--target_unclipped_quantile'),
    (dict(initial_clip=0.0), '--initial_clip'),
    (dict(delta=1.0), '--delta'),
    (dict(delta=0.0), '--delta'),
    (dict(alpha=0.5), '--alpha'),
    (dict(num_canaries=1), '--num_canaries'),
    (dict(num_canaries=-3), '--num_canaries'),
    (dict(num_canaries=10**9 + 1), '--num_canaries'),
    (dict(num_unseen_canaries=1), '--num_unseen_canaries'),
    (dict(num_canaries=0), '--num_unseen_canaries'),
    (dict(train_epochs=2), '--train_epochs'),
    (dict(total_rounds=0), '--total_rounds'),
    (dict(sampling='poisson'), '--canary_repeats'),
    (dict(canary_buffer_rounds=0), '--canary_buffer_rounds'),
    (dict(seed=-1), '--seed'),
    (dict(canary_seed=2**32), '--canary_seed'),
    (dict(rounds_per_evaluation=0), '--rounds_per_evaluation'),
    (dict(run_name='a/b'), '--run_name'),
    (dict(use_synthetic_data=False), '--data_dir'),
    (dict(data_dir='/some/dir'), '--data_dir'),
    (dict(seeded_noise='yes'), '--seeded_noise'),
    (dict(tff_workers=0), '--tff_workers'),
    (dict(tff_workers=2.5), '--tff_workers'),
    (dict(tff_worker_addresses='localhost'), '--tff_worker_addresses'),
    (dict(tff_worker_addresses='h:99999'), '--tff_worker_addresses'),
    (dict(tff_workers=2, tff_worker_addresses='127.0.0.1:9'), '--tff_workers'),
    (dict(accelerator='tpu'), '--accelerator'),
    # Data-dependent.
    (dict(clients_per_round=tiny_run.NUM_CLIENTS + 1), '--clients_per_round'),
    (dict(canary_repeats=tiny_run.TOTAL_ROUNDS + 1), '--canary_repeats'),
    (dict(noise_multiplier=5.0), '--noise_multiplier'),
    (dict(use_synthetic_data=False, data_dir='/does/not/exist'), '--data_dir'),
]


@pytest.mark.parametrize('overrides, flag', _BAD_CONFIGS)
def test_bad_config_is_rejected_before_writing(tmp_path, overrides, flag):
  root = tmp_path / 'root'
  with pytest.raises(train_config.ConfigError, match=flag):
    train.run_training(tiny_run.config(str(root), **overrides))
  assert not root.exists()


def test_seed_flags_take_the_one_seed_limit():
  # --seed and --canary_seed share canary_spec.MAX_SEED = 2^32 - 1, the limit
  # of every seed, which admits the uint32 DP noise seed derived from --seed.
  top = canary_spec.MAX_SEED
  assert top == 2**32 - 1
  tiny_run.config('/runs', seed=top, canary_seed=top).validate()
  for flag in ('seed', 'canary_seed'):
    with pytest.raises(train_config.ConfigError, match=f'--{flag}'):
      tiny_run.config('/runs', **{flag: top + 1}).validate()


@pytest.mark.skipif(bool(tf.config.list_logical_devices('GPU')),
                    reason='a GPU is visible')
def test_gpu_accelerator_without_gpu_is_rejected(tmp_path):
  root = tmp_path / 'root'
  with pytest.raises(train_config.ConfigError,
                     match='--accelerator=gpu.*no GPU'):
    train.run_training(tiny_run.config(str(root), accelerator='gpu'))
  assert not root.exists()


def test_resident_data_is_a_jax_engine_flag(tmp_path):
  root = tmp_path / 'root'
  with pytest.raises(train_config.ConfigError,
                     match='--noresident_data applies to --backend=jax'):
    train.run_training(tiny_run.config(str(root), resident_data=False))
  assert not root.exists()


def test_only_location_display_and_saving_flags_may_change_on_resume():
  saved = tiny_run.config('/runs').validate().to_json_dict()
  moved = tiny_run.config('/elsewhere', run_name='other', progress_bar=True,
                          rounds_per_checkpoint=1, canary_buffer_rounds=2,
                          tff_workers=2, resident_data=False).validate()
  train_config.check_resumable(moved, saved, '/runs/tiny')  # No error.
  changed = tiny_run.config('/runs', noise_multiplier=0.1, seed=3).validate()
  with pytest.raises(train_config.ConfigError,
                     match=r"'/runs/tiny' holds a run with other flags: "
                     r'--noise_multiplier=0\.05 \(now 0\.1\), --seed=0 '
                     r'\(now 3\);'):
    train_config.check_resumable(changed, saved, '/runs/tiny')


def test_run_saved_before_a_flag_existed_resumes_with_its_default():
  # config.json of a run started before --all_iterates_statistic and
  # --canary_clip existed: it ran with their defaults' behaviour.
  saved = tiny_run.config('/runs').validate().to_json_dict()
  del saved['all_iterates_statistic'], saved['canary_clip']
  train_config.check_resumable(tiny_run.config('/runs').validate(), saved,
                               '/runs/tiny')  # No error.
  other = tiny_run.config('/runs', all_iterates_statistic='model_delta',
                          canary_clip='clip').validate()
  with pytest.raises(train_config.ConfigError,
                     match=r"--all_iterates_statistic='aggregate' \(now "
                     r"'model_delta'\), --canary_clip='project' \(now "
                     r"'clip'\)"):
    train_config.check_resumable(other, saved, '/runs/tiny')


def test_reference_code_conventions_parse_from_flags():
  config = _parse_flagfile('demo.cfg', '--all_iterates_statistic=model_delta',
                           '--canary_clip=clip')
  assert (config.all_iterates_statistic, config.canary_clip) == (
      'model_delta', 'clip')
  # The defaults are the paper's text.
  default = _parse_flagfile('demo.cfg')
  assert (default.all_iterates_statistic, default.canary_clip) == (
      'aggregate', 'project')


def _parse_flagfile(name: str, *extra: str) -> train_config.TrainConfig:
  flag_values = flags.FlagValues()
  train_flags.define_flags(flag_values)
  flag_values(['train', f'--flagfile={os.path.join(_REPO, "configs", name)}',
               *extra])
  return train_flags.config_from_flags(flag_values).validate()


def _grid(name: str) -> dict[str, list[str]]:
  return grid.parse_grid(os.path.join(_REPO, 'configs', name))


def test_emnist_config_is_table_4():
  config = _parse_flagfile('emnist.cfg', '--data_dir=/data')
  assert (config.task, config.sampling, config.clients_per_round,
          config.train_epochs, config.client_optimizer,
          config.client_learning_rate, config.server_optimizer,
          config.server_learning_rate, config.server_momentum,
          config.client_batch_size, config.num_canaries,
          config.num_unseen_canaries, config.delta) == (
              'emnist_character', 'shuffle', 101, 15, 'sgd', 0.031, 'sgdm',
              1.0, 0.9, 16, 1000, 1000, None)
  assert _grid('emnist.cfg') == {
      'noise_multiplier': ['0', '0.0487', '0.0958', '0.2207'],
      'canary_repeats': ['1', '2', '4', '8']}


def test_stackoverflow_config_is_table_3():
  config = _parse_flagfile('stackoverflow.cfg', '--data_dir=/data')
  assert (config.task, config.vocab_size, config.clients_per_round,
          config.total_rounds, config.client_learning_rate,
          config.server_learning_rate, config.clipping_norm,
          config.num_canaries, config.num_unseen_canaries) == (
              'stackoverflow_word', 10000, 167, 2048, 1.0, 0.56, 0.0, 1000,
              1000)
  assert _grid('stackoverflow.cfg') == {
      'noise_multiplier': ['0', '0.0496', '0.0986', '0.2317'],
      'canary_repeats': ['1', '2', '4', '8']}


def test_demo_config_is_valid_and_synthetic():
  config = _parse_flagfile('demo.cfg')
  assert config.use_synthetic_data and config.num_canaries >= 50
  assert config.num_unseen_canaries == config.num_canaries
  assert set(_grid('demo.cfg')) == {'noise_multiplier'}
  # Canaries are a small share of each round's participants (2.5 of 42.5), so
  # that they barely change the accuracy (measured: < 1 point, README).
  per_round = config.num_canaries * config.canary_repeats / config.total_rounds
  assert per_round / (config.clients_per_round + per_round) < 0.06


@pytest.mark.parametrize('backend', ['tff', 'jax'])
@pytest.mark.parametrize('flag, message', [
    ('--noise_multiplier=-1', '--noise_multiplier must be'),
    ('--clients_per_round=abc', '--clients_per_round=abc'),
    ('--bogus=1', "flag 'bogus'"),
])
def test_bad_flag_is_answered_before_tensorflow_or_jax_is_imported(
    backend, flag, message):
  # With TensorFlow and JAX unimportable, a bad flag still gets its one line
  # and exit 2: neither was imported before the flags were checked.
  done = programs.run_without_frameworks(
      'experiments.train',
      ['--flagfile=configs/demo.cfg', f'--backend={backend}', flag],
      cwd=_REPO, timeout=120)
  assert done.returncode == 2, done.stderr
  assert message in done.stderr
  assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize('overrides, message', [
    (dict(mechanism='banded', clipping_norm=1.0, num_bands=0),
     '--num_bands must be >= 1; got 0'),
    (dict(mechanism='banded', clipping_norm=1.0), '--num_bands is needed'),
    (dict(num_bands=2),
     '--num_bands=2 does not apply to the gaussian mechanism'),
    (dict(mechanism='blt', clipping_norm=0.0), '--mechanism=blt needs a fixed'),
    (dict(mechanism='blt', clipping_norm=1.0),
     "--backend=tff does not run --mechanism=blt: TFF's aggregators have no "
     'matrix-factorization noise'),
])
def test_correlated_noise_flags_are_checked_before_writing(
    tmp_path, overrides, message):
  root = tmp_path / 'root'
  with pytest.raises(train_config.ConfigError, match=message):
    train.run_training(tiny_run.config(str(root), **overrides))
  assert not root.exists()


def test_mechanism_may_not_change_on_resume():
  saved = tiny_run.config('/runs').validate().to_json_dict()
  del saved['mechanism'], saved['num_bands']  # Saved before they existed.
  changed = tiny_run.config('/runs', mechanism='blt',
                            clipping_norm=1.0).validate()
  with pytest.raises(train_config.ConfigError,
                     match=r"--mechanism='gaussian' \(now 'blt'\)"):
    train_config.check_resumable(changed, saved, '/runs/tiny')


def test_correlated_noise_outside_the_jax_environment_is_one_line_exit_2(
    tmp_path):
  # This environment has jax but not jax-privacy.
  if importlib.util.find_spec('jax_privacy') is not None:
    pytest.skip('jax-privacy is installed here')
  done = subprocess.run(
      [sys.executable, '-m', 'experiments.train', '--backend=jax',
       '--use_synthetic_data', '--total_rounds=4', '--num_canaries=8',
       '--num_unseen_canaries=8', '--mechanism=blt', '--clipping_norm=1',
       f'--root_output_dir={tmp_path / "root"}'],
      cwd=_REPO, capture_output=True, text=True, timeout=300, check=False)
  assert done.returncode == 2, done.stderr
  assert not (tmp_path / 'root').exists()
  assert ('--backend=jax does not run --mechanism=blt: the blt mechanism '
          'needs jax-privacy' in done.stderr)
  assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize('flag', ['embedding_size', 'lstm_size'])
def test_word_model_widths_other_than_tffs_need_the_jax_engine(flag):
  # TFF trains its own baseline LSTM (embedding 96, LSTM 670); the JAX
  # engine's model takes the widths; the image tasks ignore them.
  default = train_config.TrainConfig.__dataclass_fields__[flag].default
  config = train_config.TrainConfig(backend='tff', task='shakespeare',
                                    total_rounds=1, **{flag: 32})
  with pytest.raises(train_config.ConfigError) as raised:
    config.validate()
  assert str(raised.value) == (
      f"--{flag}=32 applies to --backend=jax only: the TFF engine trains "
      f"TFF's baseline LSTM (--{flag}={default}); got --backend=tff.")
  for other in (dict(backend='jax'), dict(task='emnist_character',
                                          use_synthetic_data=True)):
    fields = {**config.to_json_dict(), **other}
    assert getattr(train_config.TrainConfig(**fields).validate(), flag) == 32


def test_shakespeare_dp_config_trains_the_narrow_lstm_at_a_meaningful_epsilon():
  config = _parse_flagfile('shakespeare_dp.cfg')
  assert (config.backend, config.task, config.vocab_size,
          config.embedding_size, config.lstm_size, config.clipping_norm,
          config.canary_repeats) == ('jax', 'shakespeare', 5000, 32, 128, 0.5,
                                     1)
  assert config.num_canaries == config.num_unseen_canaries >= 50
  grid_values = _grid('shakespeare_dp.cfg')
  assert grid_values == {'noise_multiplier': ['0', str(
      config.noise_multiplier)]}
  # A canary is presented once: its analytical epsilon is one Gaussian
  # mechanism's at the config's z, here by dp_accounting's PLD accountant,
  # at delta = m^-1.1 for the plays' m roles.
  roles = len(shakespeare.load(vocab_size=config.vocab_size).client_ids)
  accountant = dp_accounting.pld.PLDAccountant()
  accountant.compose(dp_accounting.GaussianDpEvent(config.noise_multiplier))
  assert accountant.get_epsilon(roles**-1.1) <= 50

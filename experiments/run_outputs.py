"""A run directory's files, end-of-run results and errors, for either engine.

Both engines (`--backend=tff`, `experiments.train`; `--backend=jax`,
`experiments.train_jax`) write the same layout (see `experiments.train`'s
docstring) and the same results: the cosine CSVs of both threat models
(Algorithms 2 and 3), the privacy report (`one_shot_epe.run_report`) and
the density plot (Figures 1 and 3). Both raise `REPORTED_ERRORS` for what a
launcher reports in one line. Framework-free.
"""

import collections
import dataclasses
import os
from collections.abc import Sequence

import numpy as np

from experiments import train_config
from one_shot_epe import accounting
from one_shot_epe import atomic_io
from one_shot_epe import plots
from one_shot_epe import run_lock
from one_shot_epe import run_report
from one_shot_epe import write_failures

CONFIG_FILE = 'config.json'
METRICS_FILE = 'metrics.csv'
CANARY_COSINES_FILE = 'canary_cosines.csv'
TENSORBOARD_DIR = 'tensorboard'
CHECKPOINT_DIR = 'checkpoints'
FINAL_COSINES_FILE = 'final_cosines.csv'
MAX_COSINES_FILE = 'max_cosines.csv'
REPORT_JSON_FILE = 'report.json'
REPORT_MARKDOWN_FILE = 'report.md'
DENSITY_PLOT_FILE = 'cosine_densities.png'

# What a launcher reports in one line with exit status 2: a bad flag, a run
# directory in use by another launcher, a failed write (a full disk, ...).
REPORTED_ERRORS = (train_config.ConfigError, run_lock.RunLockedError,
                   write_failures.WriteFailure)


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What a run produced.

  Attributes:
    config: The validated config (run name resolved).
    run_dir: Directory holding the outputs (experiments.train's docstring).
    total_rounds: T, the number of training rounds of the run.
    resumed_from_round: The checkpoint round this invocation started from (0
      for a fresh run; T when the run was already complete).
    rounds_trained: Training rounds this invocation ran.
    dim: d, the number of model parameters.
    delta: The delta of the report.
    accuracy: Final test accuracy (`experiments.train.ACCURACY_METRICS[task]`).
    final_cosines: Seen canaries' cosines with the final model (empty without
      canaries).
    final_unseen_cosines: Unseen canaries' cosines with the final model.
    seen_maxima, unseen_maxima: Max-over-rounds cosines (empty without).
    report: The privacy report; None without canaries.
  """
  config: train_config.TrainConfig
  run_dir: str
  total_rounds: int
  resumed_from_round: int
  rounds_trained: int
  dim: int
  delta: float
  accuracy: float
  final_cosines: np.ndarray
  final_unseen_cosines: np.ndarray
  seen_maxima: np.ndarray
  unseen_maxima: np.ndarray
  report: run_report.RunReport | None


def rounds_line(result: RunResult) -> str:
  """What this invocation did, in one line: a fresh run, a resumed one, or none."""
  if result.resumed_from_round == 0:
    what = f'trained {result.rounds_trained}'
  elif result.rounds_trained == 0:
    what = (f'resumed from round {result.resumed_from_round}: already '
            'complete, nothing trained')
  else:
    what = (f'resumed from round {result.resumed_from_round}, trained '
            f'{result.rounds_trained} now')
  return (f'Rounds: {result.total_rounds} ({what}); test accuracy '
          f'{result.accuracy:.4f}')


def write_results(config: train_config.TrainConfig, *, dim: int, delta: float,
                  num_train_clients: int, total_rounds: int, data_source: str,
                  accuracy: float, final_cosines: np.ndarray,
                  final_unseen_cosines: np.ndarray, seen_maxima: np.ndarray,
                  unseen_maxima: np.ndarray,
                  schedule: Sequence[Sequence[int]]) -> run_report.RunReport:
  """Writes the cosine CSVs, the privacy report and the density plot.

  `schedule` lists the seen canaries inserted in each round (ids 0..k-1),
  whose counts give the last-iterate heuristic its mixture.
  """
  run_dir = config.run_dir
  has_unseen = unseen_maxima.size > 0
  final_columns = {'cosine': final_cosines}
  if has_unseen:
    final_columns['unseen'] = final_unseen_cosines
  atomic_io.write_columns_csv(os.path.join(run_dir, FINAL_COSINES_FILE),
                              final_columns)
  if has_unseen:
    atomic_io.write_columns_csv(os.path.join(run_dir, MAX_COSINES_FILE),
                                {'seen': seen_maxima, 'unseen': unseen_maxima})
  setting = collections.OrderedDict(
      task=config.task, data=data_source, total_rounds=total_rounds,
      clients_per_round=config.clients_per_round, sampling=config.sampling,
      clipping=('adaptive' if config.clipping_norm == 0 else
                config.clipping_norm),
      num_canaries=config.num_canaries,
      num_unseen_canaries=config.num_unseen_canaries,
      canary_repeats=config.canary_repeats,
      all_iterates_statistic=config.all_iterates_statistic,
      canary_clip=config.canary_clip, seed=config.seed,
      canary_seed=config.canary_seed)
  if config.backend != 'tff':
    setting['backend'] = config.backend
  inserted = [i for ids in schedule for i in ids]
  report = run_report.build_run_report(
      final_cosines=final_cosines, dim=dim, delta=delta,
      noise_multiplier=config.noise_multiplier, alpha=config.alpha,
      final_unseen_cosines=final_unseen_cosines if has_unseen else None,
      presentation_counts=np.bincount(np.asarray(inserted, np.int64),
                                      minlength=config.num_canaries),
      seen_maxima=seen_maxima if has_unseen else None,
      unseen_maxima=unseen_maxima if has_unseen else None,
      accuracy=accuracy, setting=setting,
      canary_presentations=config.canary_repeats,
      participation=accounting.Participation(
          sampling=config.sampling, clients_per_round=config.clients_per_round,
          num_clients=num_train_clients, rounds=total_rounds))
  report.write(os.path.join(run_dir, REPORT_JSON_FILE),
               os.path.join(run_dir, REPORT_MARKDOWN_FILE))
  panels = {'final model': {'seen canaries': final_cosines}}
  if has_unseen:
    panels['max over rounds'] = {'seen canaries': seen_maxima,
                                 'unseen canaries': unseen_maxima}
  plots.plot_cosine_densities(
      panels, dim, os.path.join(run_dir, DENSITY_PLOT_FILE),
      title=f'{config.task}, noise {config.noise_multiplier:g}, '
      f'{config.canary_repeats} repetition(s)')
  return report

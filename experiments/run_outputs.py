"""A run's end-of-run results and errors, for either engine.

Both engines (`--backend=tff`, `--backend=jax`; `experiments.train`) end with
the same results, written here: the cosine CSVs of both threat models
(Algorithms 2 and 3), the privacy report (`one_shot_epe.run_report`) and the
density plot (Figures 1 and 3), under the run directory's layout
(`one_shot_epe.run_directory`). `REPORTED_ERRORS` are what a launcher reports
in one line. Framework-free.
"""

import collections
import dataclasses
import os

from experiments import engine
from experiments import train_config
from one_shot_epe import accounting
from one_shot_epe import atomic_io
from one_shot_epe import canary_spec
from one_shot_epe import plots
from one_shot_epe import run_directory
from one_shot_epe import run_lock
from one_shot_epe import run_report
from one_shot_epe import write_failures

# What a launcher reports in one line with exit status 2: a bad flag, a run
# directory in use by another launcher, a failed write (a full disk, ...), a
# device out of memory.
REPORTED_ERRORS = (train_config.ConfigError, run_lock.RunLockedError,
                   write_failures.WriteFailure, engine.DeviceOutOfMemory)


@dataclasses.dataclass(frozen=True)
class RunResult:
  """What a run produced.

  Attributes:
    config: The validated config (run name resolved).
    run_dir: Directory holding the outputs (`one_shot_epe.run_directory`).
    total_rounds: T, the number of training rounds of the run.
    delta: The delta of the report.
    outcome: What the engine measured (cosines, accuracy, rounds trained
      now); its fields are also this result's (`result.accuracy`, ...).
    report: The privacy report; None without canaries.
  """
  config: train_config.TrainConfig
  run_dir: str
  total_rounds: int
  delta: float
  outcome: canary_spec.CanaryOutcome
  report: run_report.RunReport | None

  def __getattr__(self, name: str):
    if name in canary_spec.CanaryOutcome._fields:
      return getattr(self.outcome, name)
    raise AttributeError(name)


def rounds_line(result: RunResult) -> str:
  """What this invocation did, in a line: a fresh run, a resumed one, or none."""
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


def write_results(run: engine.PreparedRun,
                  outcome: canary_spec.CanaryOutcome) -> run_report.RunReport:
  """Writes the cosine CSVs, the privacy report and the density plot.

  The schedule's presentation counts give the last-iterate heuristic its
  mixture.
  """
  config = run.config
  final_cosines = outcome.final_cosines
  final_unseen_cosines = outcome.final_unseen_cosines
  seen_maxima, unseen_maxima = outcome.seen_maxima, outcome.unseen_maxima
  dim, delta, total_rounds = outcome.dim, run.delta, run.total_rounds
  run_dir = config.run_dir
  has_unseen = unseen_maxima.size > 0
  final_columns = {'cosine': final_cosines}
  if has_unseen:
    final_columns['unseen'] = final_unseen_cosines
  atomic_io.write_columns_csv(
      os.path.join(run_dir, run_directory.FINAL_COSINES_FILE), final_columns)
  if has_unseen:
    atomic_io.write_columns_csv(
        os.path.join(run_dir, run_directory.MAX_COSINES_FILE),
        {'seen': seen_maxima, 'unseen': unseen_maxima})
  setting = collections.OrderedDict(
      task=config.task, data=run.data.data_source, total_rounds=total_rounds,
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
  report = run_report.build_run_report(
      final_cosines=final_cosines, dim=dim, delta=delta,
      noise_multiplier=config.noise_multiplier, alpha=config.alpha,
      final_unseen_cosines=final_unseen_cosines if has_unseen else None,
      presentation_counts=run.canaries.presentation_counts(),
      seen_maxima=seen_maxima if has_unseen else None,
      unseen_maxima=unseen_maxima if has_unseen else None,
      accuracy=outcome.accuracy, setting=setting,
      canary_presentations=config.canary_repeats,
      participation=accounting.Participation(
          sampling=config.sampling, clients_per_round=config.clients_per_round,
          num_clients=run.num_train_clients, rounds=total_rounds))
  report.write(os.path.join(run_dir, run_directory.REPORT_JSON_FILE),
               os.path.join(run_dir, run_directory.REPORT_MARKDOWN_FILE))
  panels = {'final model': {'seen canaries': final_cosines}}
  if has_unseen:
    panels['max over rounds'] = {'seen canaries': seen_maxima,
                                 'unseen canaries': unseen_maxima}
  plots.plot_cosine_densities(
      panels, dim, os.path.join(run_dir, run_directory.DENSITY_PLOT_FILE),
      title=f'{config.task}, noise {config.noise_multiplier:g}, '
      f'{config.canary_repeats} repetition(s)')
  return report

r"""DP-FedAvg with canaries on EMNIST, StackOverflow or Fashion-MNIST; a report.

The experiment launcher of Section 5 of Andrew et al., "One-shot Empirical
Privacy Estimation for Federated Learning" (ICLR 2024). One run trains
DP-FedAvg with k seen canary clients inserted into the aggregation and m
unseen canaries tracked alongside (Algorithms 2 and 3), and ends with the
privacy report of both threat models (final model: Algorithm 2; all
iterates: Algorithm 3) and the cosine density plot. --backend picks the
engine: TensorFlow Federated (`experiments.backend_tff`, the default) or JAX
(`experiments.backend_jax`, GPUs and TPUs); everything else is shared.

  python -m experiments.train --flagfile=configs/demo.cfg --noise_multiplier=0.1
  python -m experiments.train --task=emnist_character --data_dir=~/tff_data \
      --clients_per_round=101 --train_epochs=15 --noise_multiplier=0.0487 ...

One launcher, in three steps:

1. `prepare`: the flags (`experiments.train_config`) become the run's plan
   (`experiments.run_planning.plan_run`: the engine-neutral
   `one_shot_epe.design.run_plan.RunPlan`, its canary spec and DP
   aggregation), checked whole before any slow work: the output directory
   writable, the run's memory and work against the machine
   (`one_shot_epe.design.run_size`), the canaries' share of a round, the
   engine's `supports(plan)`, the run directory's saved flags; then the
   engine loads the task's data and the plan is made on its clients. A bad
   run exits with status 2 and one line naming the flag, before anything is
   written.
2. The engine trains (or resumes) the run from its checkpoints, locked for
   the whole run (`run_directory.owned`): one writer per run directory; a
   second launcher on the same directory exits with status 2 naming the
   holder's pid, writing nothing. It reports each round
   (`one_shot_epe.runtime.round_record`) to `run_outputs.RoundWriter` (metrics.csv,
   canary_cosines.csv), to `training_health.TrainingHealth` (a runaway clip
   or a non-finite loss: one warning, a note in the report) and a progress
   bar.
3. `run_outputs.write_results` writes the cosine CSVs, the privacy report and
   the density plot.

--backend picks the engine from `BACKENDS`; one whose framework is not
installed exits with status 2 and one line naming the package extra to
install.

Outputs, under `--root_output_dir/--run_name/`: see `one_shot_epe.
run_directory`. The cosine CSVs are in the format of `python -m
one_shot_epe.reporting.epsilon_cli`; row i is canary i (seen ids 0..k-1; unseen canary i
has id UNSEEN_ID_OFFSET + i).

Resume: checkpoints are taken at round 0, every --rounds_per_checkpoint rounds
and after the last round, the canaries' state with the learning state.
Rerunning the same command (same flags) loads the latest complete checkpoint
and continues from there; a finished run does no training and rewrites the
same results. Ctrl-C or SIGTERM first saves the last completed round as a
checkpoint ('interrupted after round N of T; rerun the same command to
resume from round N', status 130); a run killed with SIGKILL loses the
rounds since its last checkpoint, and its rerun says how many. A checkpoint
is complete or absent; a rerun deletes the leftovers of a killed run, and
refuses with exit status 2 to resume from a checkpoint whose files fail to
read back. A resumed run (interrupted, or killed mid-round or
mid-checkpoint), a second run with the same flags, and a TFF run spread
over --tff_workers processes all write the same cosines, maxima, per-round
CSVs and report, byte for byte (tests/train_resume_test.py); only the
wall-clock columns of metrics.csv differ. Checkpoints written before the
canaries' state joined the learning state (version 0.1) cannot be resumed:
the run is refused with exit status 2 and one line, before anything is
written.

A failed write (a full disk, an I/O error: a checkpoint, a CSV, the report,
the plot, config.json) exits with status 2 and one line naming the file and
the cause (`one_shot_epe.runtime.write_failures`); the temporary files of the failed
write are removed, everything written before is intact, and rerunning the
same command resumes from the last checkpoint.

The flags are defined only when this module runs as a program (or by
`train_flags.define_flags`), so the launcher is also a library:

  run_training(TrainConfig(...)) -> RunResult   train or resume, write outputs
  prepare(TrainConfig(...)) -> PreparedRun      validate only, write nothing
  define_flags(flag_values); config_from_flags(flag_values) -> TrainConfig
                                                the same flags (and flagfiles)
                                                on any absl FlagValues
"""

import os
import sys

# What to install for each engine's framework (pyproject's extras); [tff]
# cannot be resolved (TFF 0.87.0 pins a jaxlib the index lacks), so its
# tested closure is installed without the resolver.
_EXTRAS = {'tff': ('the [tff] extra, on Python 3.11: pip install --no-deps '
                   '-r requirements.txt (its closure; TFF 0.87 pins a jaxlib '
                   'the package index lacks)'),
           'jax': "pip install 'one-shot-epe[jax]'"}
# The top-level modules of each engine's framework.
_FRAMEWORKS = {'tff': ('tensorflow', 'tensorflow_federated'),
               'jax': ('jax', 'jaxlib')}


def _missing_framework(backend: str, error: ImportError) -> str | None:
  """The one line for `error` if it is `backend`'s framework missing."""
  if (error.name or '').split('.')[0] not in _FRAMEWORKS[backend]:
    return None
  return (f'--backend={backend} needs {error.name}, which is not installed: '
          f'{_EXTRAS[backend]}')


if __name__ == '__main__':
  # Before TensorFlow or JAX is imported: the flags, then (TFF only) the
  # network isolation mode's checks (exit 2) and a quiet TensorFlow import.
  from one_shot_epe.runtime import command_line as _cli
  _cli.check_flagfiles_or_exit(sys.argv)  # Before absl opens them.
  if _cli.requested_backend(sys.argv) == 'jax':
    from experiments import train_flags as _train_flags
    _train_flags.check_flags_or_exit(sys.argv)
  else:
    from one_shot_epe.tff_engine import isolation
    from one_shot_epe.tff_engine import quiet
    isolation.check_program(sys.argv)
    from experiments import train_flags as _train_flags
    _train_flags.check_flags_or_exit(sys.argv)
    try:
      quiet.quiet_startup(sys.argv, import_tensorflow=True)
    except ImportError as _error:
      _line = _missing_framework('tff', _error)
      if _line is None:
        raise
      print(f'error: {_line}', file=sys.stderr)
      sys.exit(2)

# pylint: disable=g-import-not-at-top,g-bad-import-order
import contextlib
import dataclasses
from collections.abc import Callable, Sequence

from absl import app
from absl import flags
from absl import logging

from experiments import engine
from experiments import run_outputs
from experiments import run_planning
from experiments import train_config
from experiments import train_flags
from one_shot_epe.design import canary_schedules
from one_shot_epe.design import tasks
from one_shot_epe.runtime import checkpoint_store
from one_shot_epe.runtime import command_line
from one_shot_epe.runtime import interrupts
from one_shot_epe.runtime import round_progress
from one_shot_epe.runtime import round_record
from one_shot_epe.runtime import run_directory
from one_shot_epe.runtime import training_health

__all__ = ['BACKENDS', 'PreparedRun', 'REPORTED_ERRORS', 'RunResult',
           'check_runs_per_program', 'main', 'prepare', 'run_program',
           'run_training', 'saved_round']

PreparedRun = engine.PreparedRun
RunResult = run_outputs.RunResult
REPORTED_ERRORS = run_outputs.REPORTED_ERRORS


def _import_tff() -> engine.Backend:
  from experiments import backend_tff
  return backend_tff


def _import_jax() -> engine.Backend:
  from experiments import backend_jax
  return backend_jax


# The engines by --backend, each imported only when a run asks for it.
BACKENDS: dict[str, Callable[[], engine.Backend]] = {
    'tff': _import_tff, 'jax': _import_jax}


def _backend(name: str) -> engine.Backend:
  """The engine of --backend=`name`, imported now.

  Raises:
    train_config.ConfigError: the engine's framework is not installed (one
      line naming the package extra to install).
  """
  try:
    return BACKENDS[name]()
  except ImportError as error:
    line = _missing_framework(name, error)
    if line is None:
      raise
    raise train_config.ConfigError(line) from None


def _checkpoints(backend: engine.Backend,
                 run_dir: str) -> checkpoint_store.CheckpointStore:
  """The engine's checkpoints of the run in `run_dir`."""
  return backend.checkpoints(os.path.join(run_dir,
                                          run_directory.CHECKPOINT_DIR))


def saved_round(config: train_config.TrainConfig) -> int | None:
  """The round of the newest checkpoint in `config`'s run directory.

  Args:
    config: a validated config (its run directory and engine).

  Returns:
    The round a rerun resumes from, or None when there is no checkpoint.
  """
  return _checkpoints(_backend(config.backend), config.run_dir).latest()


def _check_run_dir(config: train_config.TrainConfig,
                   backend: engine.Backend) -> None:
  """`run_directory.check` with the flags' resume rule and errors."""
  try:
    run_directory.check(
        config.run_dir,
        accept_config=lambda saved: train_config.check_resumable(
            config, saved, config.run_dir),
        checkpoints=_checkpoints(backend, config.run_dir),
        checkpoint_limit=run_planning.checkpoint_limit(config))
  except train_config.ConfigError:
    raise
  except run_directory.RunDirectoryError as error:
    raise train_config.ConfigError(f'--{error.flag}: {error}') from None
  except ValueError as error:
    raise train_config.ConfigError(f'--run_name: {error}') from None


def _check_free_space(run: PreparedRun, backend: engine.Backend) -> None:
  """Refuses a run whose remaining checkpoints cannot fit the disk."""
  config = run.config
  store = _checkpoints(backend, config.run_dir)
  saved = store.rounds()
  last = max(saved, default=-1)
  to_write = [t for t in run_directory.checkpoint_rounds(
      run.plan.total_rounds, config.rounds_per_checkpoint) if t > last]
  try:
    run_directory.check_free_space(
        config.run_dir, checkpoint_bytes=backend.checkpoint_bytes(run),
        to_write=len(to_write), saved=len(saved), kept=store.kept)
  except run_directory.RunDirectoryError as error:
    raise train_config.ConfigError(f'--{error.flag}: {error}') from None


def prepare(config: train_config.TrainConfig) -> PreparedRun:
  """Validates `config`, its whole plan, data and run directory; writes nothing.

  In order, so that a bad run is refused before any slow work: the flags
  (`TrainConfig.validate`), the run directory writable and the whole plan
  (`run_planning.check_plan`: its memory and work against the machine, the
  canaries' share, the mechanism, the engine's `supports(plan)`) from the
  task's client count where that is known without data, the engine's own
  flags, the run directory's saved config and newest checkpoint; then the
  data (read offline, never downloaded), the plan again on the loaded
  clients, the disk and the device's memory.

  Args:
    config: the run's config; validated here (`TrainConfig.validate`).

  Returns:
    The prepared run: the validated config, the engine's data and the
    engine-neutral plan (sampler, canaries, DP aggregation, delta).

  Raises:
    train_config.ConfigError: a flag is invalid or the engine cannot run it,
      the run cannot run on this machine, the output directory is not
      writable, the data directory is missing or malformed, the run
      directory holds a run with other flags, the checkpoint a rerun would
      resume from is damaged, or the disk (or the device's memory) cannot
      hold the run.
  """
  config = config.validate()
  run_planning.check_plan(config)
  backend = _backend(config.backend)
  backend.check_options(config)
  _check_run_dir(config, backend)
  data = backend.load_data(config)
  plan = run_planning.plan_run(config, data.client_ids, backend.supports)
  share = canary_schedules.canary_share_warning(
      plan.sampler.expected_clients_per_round, plan.dp.clients_per_round)
  if share is not None:
    logging.warning('%s', share)
  run = PreparedRun(config=config, data=data, plan=plan,
                    canaries=run_planning.data_canary_arrays(config, plan))
  _check_free_space(run, backend)
  backend.check_device_memory(run)
  return run


def check_runs_per_program(backend_name: str, runs_per_program: int,
                           canary_kind: str = 'gradient') -> None:
  """Refuses several runs in one program on an engine or canaries that cannot.

  Args:
    backend_name: The runs' --backend.
    runs_per_program: Runs asked to share one program.
    canary_kind: The runs' --canary_kind.

  Raises:
    train_config.ConfigError: naming --runs_per_program, if the engine
      trains one run at a time (`engine.Backend.PROGRAMS`) or the runs have
      data canaries (clients of their own run's training data).
  """
  if runs_per_program > 1 and canary_kind != 'gradient':
    raise train_config.ConfigError(
        f'--runs_per_program={runs_per_program} with --canary_kind='
        f'{canary_kind}: data canaries are clients of their own run\'s '
        'training data, so such runs train alone; use --runs_per_program=1.')
  if runs_per_program > 1 and not _backend(backend_name).PROGRAMS:
    raise train_config.ConfigError(
        f'--runs_per_program={runs_per_program} is not supported by '
        f'--backend={backend_name}, which trains one run at a time; use '
        '--backend=jax (runs with a run axis).')


def run_training(config: train_config.TrainConfig) -> RunResult:
  """Trains (or resumes) the run of `config` and writes its outputs.

  The outputs go to `config.run_dir`: config.json, the per-round CSVs, the
  checkpoints and, with canaries, the report and its figure.

  Example (synthetic data on the JAX engine, .venv-jax; 136 s wall, mostly
  compilation, on a shared 2-core Intel Xeon KVM guest under load):

    config = train_config.TrainConfig(
        backend='jax', use_synthetic_data=True, synthetic_num_clients=40,
        clients_per_round=10, total_rounds=4, noise_multiplier=1.0,
        clipping_norm=1.0, num_canaries=8, num_unseen_canaries=8,
        root_output_dir=tempfile.mkdtemp(), progress_bar=False)
    result = train.run_training(config)
    print(result.report.to_markdown())

  Args:
    config: the run's config (validated here).

  Returns:
    The run's result: its directory, rounds, delta, canary outcome and
    report (None without canaries).

  Raises:
    train_config.ConfigError: before anything is written, for an invalid
      config.
    run_lock.RunLockedError: before anything is written, when another
      process is running in the run directory.
    write_failures.WriteFailure: a write failed (e.g. the disk is full);
      the outputs written before are intact and a rerun resumes.
  """
  return run_program([config])[0]


def run_program(configs: Sequence[train_config.TrainConfig], *,
                name_runs: bool = False) -> list[RunResult]:
  """Trains (or resumes) R runs as one program; writes each run's outputs.

  One config is `run_training`. Several run on the JAX engine as one
  program (`jax_engine.training.train_program`: one computation with a run
  axis on accelerators, the runs' rounds in turn on a CPU): they
  may differ only in `train_config.PROGRAM_DIFFERENCES` (seeds, canaries,
  noise multiplier, where they are written), and each run has its own run
  directory, lock, checkpoints, CSVs and report, as if run alone (a run
  resumes from its own checkpoint).

  Ctrl-C or SIGTERM while training: the engine saves each run's state after
  its last completed round as a checkpoint (unless that round has one), the
  run's CSVs through it written first, before the interrupt ends the
  program; a rerun resumes every run from there.

  Args:
    configs: the runs' configs (at least one), alike but for
      `train_config.PROGRAM_DIFFERENCES`.
    name_runs: whether the line of an interrupt names the runs (their
      directories) even for a single run.

  Returns:
    Each run's result, in the order of `configs`.

  Raises:
    As `run_training`, for every run before any is written; also
    `train_config.ConfigError` naming --runs_per_program when the runs
    cannot share a program, and `interrupts.Interrupted` ('interrupted
    after round N of T; rerun the same command to resume from round N',
    N the round saved) for Ctrl-C or SIGTERM while training or writing,
    every lock released and every checkpoint complete or absent.
  """
  runs = [prepare(config) for config in configs]
  backend = _backend(runs[0].config.backend)
  check_runs_per_program(runs[0].config.backend, len(runs),
                         runs[0].config.canary_kind)
  train_config.check_program([run.config for run in runs])
  # Runs of one program share their data: one copy.
  runs = [dataclasses.replace(run, data=runs[0].data) for run in runs]
  if len(runs) > 1:
    backend.check_device_memory(runs[0], runs=len(runs))
  stores = [_checkpoints(backend, run.config.run_dir) for run in runs]
  # One progress bar: the program's rounds, as its first run sees them.
  entry = tasks.task_entry(runs[0].config.task)
  engine_task = entry.tff if runs[0].config.backend == 'tff' else entry.jax
  progress = round_progress.ProgressBar(runs[0].plan.total_rounds,
                                        runs[0].config.progress_bar,
                                        engine_task.accuracy_metric)
  try:
    return _train_and_write(backend, runs, stores, progress)
  except KeyboardInterrupt:
    raise interrupts.Interrupted(_interrupted_line(
        runs, stores, name_runs or len(runs) > 1)) from None


def _interrupted_line(runs: Sequence[PreparedRun],
                      stores: Sequence[checkpoint_store.CheckpointStore],
                      name_runs: bool) -> str:
  """The one line of interrupted runs: the round each resumes from."""
  total = runs[0].plan.total_rounds
  saved = [store.latest() or 0 for store in stores]
  names = [run.config.run_dir for run in runs]
  if len(set(saved)) == 1:
    return interrupts.resume_line(
        saved[0], total, ', '.join(names) if name_runs else '', saved=True)
  return ('interrupted after ' + ', '.join(
      f'round {done} of {total} ({name})' for done, name in zip(saved, names))
          + '; rerun the same command to resume each from its round')


def _train_and_write(
    backend: engine.Backend, runs: Sequence[PreparedRun],
    stores: Sequence[checkpoint_store.CheckpointStore],
    progress: round_progress.ProgressBar) -> list[RunResult]:
  """`run_program`'s work once every run is prepared: lock, train, write."""
  with contextlib.ExitStack() as stack:
    writers = []
    for run, store in zip(runs, stores):
      config = run.config
      stack.enter_context(run_directory.owned(
          config.run_dir,
          recheck=lambda config=config: _check_run_dir(config, backend),
          checkpoints=store))
      run_directory.write_config(config.run_dir, config.to_json_dict())
      writers.append(run_outputs.RoundWriter(
          config.run_dir, total_rounds=run.plan.total_rounds,
          with_canaries=run.plan.spec is not None,
          resumed_from=store.latest() or 0, csv_format=backend.CSV_FORMAT))
    healths = [training_health.TrainingHealth(name=run.config.run_dir)
               for run in runs]
    observers = [round_record.Observers(
        [writer, health, progress] if i == 0 else [writer, health])
                 for i, (writer, health) in enumerate(zip(writers, healths))]
    try:
      if len(runs) == 1:
        outcomes = [backend.train(runs[0], stores[0], observers[0])]
      else:
        outcomes = backend.train_program(runs, stores, observers)
    finally:
      progress.close()
    results = []
    for run, outcome, health, writer in zip(runs, outcomes, healths,
                                            writers):
      report = None
      if run.plan.spec is not None:
        report = run_outputs.write_results(
            run, outcome, correlated=backend.correlated_report(run),
            notes=health.notes())
      results.append(RunResult(
          config=run.config, run_dir=run.config.run_dir,
          total_rounds=run.plan.total_rounds, delta=run.plan.delta,
          outcome=outcome, report=report,
          previous_round=writer.previous_round))
  return results


def main(argv: Sequence[str]) -> None:
  """Trains (or resumes) the run of the flags and prints its report.

  A bad flag, or a run directory in use by another launcher, exits with
  status 2 before anything is written; a failed write (a full disk) exits
  with status 2 naming the file and the cause (`REPORTED_ERRORS`). Ctrl-C
  or SIGTERM saves the last completed round and stops the run with one
  line, 'interrupted after round N of T; rerun the same command to resume
  from round N', and status 130 (`interrupts`).

  Args:
    argv: what absl leaves after parsing the flags: the program name only.

  Raises:
    app.UsageError: with exit code 2, for positional arguments.
    SystemExit: with status 2, for one of `REPORTED_ERRORS` (an interrupt
      ends the process with status 130, `interrupts.exit_interrupted`).
  """
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}', exitcode=2)
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # TFF logs every round at INFO.
  try:
    with interrupts.stop_on_signals():
      result = run_training(train_flags.config_from_flags())
  except REPORTED_ERRORS as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(2)
  except KeyboardInterrupt as error:
    interrupts.exit_interrupted(
        error, 'interrupted before training began; nothing was written: '
        'rerun the same command')
  print(f'Run directory: {result.run_dir}')
  print(run_outputs.rounds_line(result))
  if result.report is not None:
    print(result.report.to_markdown(), end='')
    report_path = os.path.join(result.run_dir,
                               run_directory.REPORT_MARKDOWN_FILE)
    if result.report.canary_kind == 'data':
      losses = os.path.join(result.run_dir,
                            run_directory.DATA_CANARY_LOSSES_FILE)
      print(f'Report: {report_path}; losses: {losses}')
    else:
      print(f'Report: {report_path}; plot: '
            f'{os.path.join(result.run_dir, run_directory.DENSITY_PLOT_FILE)}')


if __name__ == '__main__':
  flags.adopt_module_key_flags(train_flags)  # Listed by --helpshort.
  app.run(main, flags_parser=command_line.parse_flags_or_exit)

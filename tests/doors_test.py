"""Every door refuses a bad plan whole, before any work, in one line.

The launcher (`experiments.train`), the grid (`experiments.reproduce`) and
the TFF engine's `CanaryAudit` are given the bad inputs a new user tries:
sizes that cannot run on this machine (a billion rounds, ten million
canaries), one canary, an output directory that cannot be written, a
mechanism the engine does not run. Each exits 2 (or raises) with one line
naming the flag or argument, within seconds, before TensorFlow or JAX is
imported (the programs run where importing either fails), and writes
nothing. Ctrl-C and SIGTERM stop a training run with one line and status
130, naming the round saved for the rerun to resume from. The Flower
doors are in flower_engine_doors_test.py (`make test-flower`).
"""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from one_shot_epe.design import canary_schedules
from one_shot_epe.design import run_size

import programs

_REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# A directory no process can create entries in, root included.
_UNWRITABLE = '/proc/sys/kernel/one_shot_epe_runs'

# (extra flags, what the one line must say).
_BAD_PLANS = [
    (['--total_rounds=1000000000'],
     '--total_rounds=1000000000: the run needs about'),
    (['--num_canaries=10000000'],
     '--num_canaries=10000000: 500,000 of the 500,040 expected participants'),
    (['--num_canaries=1'], '--num_canaries must be in [2, 1000000000]'),
    (['--num_unseen_canaries=1'],
     '--num_unseen_canaries must be in [2, '),
    (['--mechanism=blt', '--clipping_norm=1'],
     '--backend=tff does not run --mechanism=blt: TFF\'s aggregators'),
    (['--train_epochs=100000000', '--total_rounds=0'], '--total_rounds'),
]


def _one_line_refusal(done: subprocess.CompletedProcess, expected: str):
  assert done.returncode == 2, done.stderr
  assert expected in done.stderr, done.stderr
  assert len(done.stderr.strip().splitlines()) == 1, done.stderr
  assert 'Traceback' not in done.stderr


@pytest.mark.parametrize('flags, expected', _BAD_PLANS)
def test_the_launcher_refuses_a_bad_plan_before_importing_a_framework(
    tmp_path, flags, expected):
  root = tmp_path / 'runs'
  start = time.monotonic()
  done = programs.run_without_frameworks(
      'experiments.train',
      ['--flagfile=configs/demo.cfg', f'--root_output_dir={root}', *flags],
      cwd=_REPO, timeout=60)
  _one_line_refusal(done, expected)
  assert time.monotonic() - start < 60
  assert not root.exists()


@pytest.mark.parametrize('flags, expected', _BAD_PLANS[:3])
def test_the_grid_refuses_a_bad_plan_before_importing_a_framework(
    tmp_path, flags, expected):
  output_dir = tmp_path / 'grid'
  done = programs.run_without_frameworks(
      'experiments.reproduce',
      ['--config=configs/demo.cfg', f'--output_dir={output_dir}', *flags],
      cwd=_REPO, timeout=60)
  _one_line_refusal(done, expected)
  assert not output_dir.exists()


@pytest.mark.parametrize('program, flag', [
    ('experiments.train', '--root_output_dir'),
    ('experiments.reproduce', '--output_dir')])
def test_an_unwritable_output_directory_is_named_not_writable(program, flag):
  config = ('--flagfile=configs/demo.cfg' if program == 'experiments.train'
            else '--config=configs/demo.cfg')
  done = programs.run_without_frameworks(
      program, [config, f'{flag}={_UNWRITABLE}'], cwd=_REPO, timeout=60)
  _one_line_refusal(done, f'{flag}: ')
  assert 'is not writable' in done.stderr
  assert 'MiB free' not in done.stderr


def test_a_run_of_a_billion_rounds_is_refused_by_its_memory():
  # The estimate, not an allocation: T x the per-round records.
  shape = run_size.RunShape(total_rounds=10**9, num_seen=50, num_unseen=50)
  with pytest.raises(run_size.PlanRefused, match='of memory') as refused:
    run_size.check(shape, memory_limit=64 * 2**30)
  assert refused.value.parameter == 'total_rounds'
  assert shape.memory()['per-round records'] == (
      run_size.ROUND_RECORD_BYTES * 10**9)
  run_size.check(run_size.RunShape(total_rounds=10**4, num_seen=50,
                                   num_unseen=50), memory_limit=64 * 2**30)


def test_work_beyond_the_ceiling_names_the_larger_cost():
  training = run_size.RunShape(
      total_rounds=10**7, num_seen=2, num_unseen=2, dim=10**6,
      clients_per_round=1000, examples_per_client=1000,
      flops_per_example=1e6)
  with pytest.raises(run_size.PlanRefused, match='floating-point') as refused:
    run_size.check(training, memory_limit=2**60)
  assert refused.value.parameter == 'total_rounds'
  canaries = run_size.RunShape(total_rounds=10**4, num_seen=10**8,
                               num_unseen=10, dim=10**6)
  with pytest.raises(run_size.PlanRefused) as refused:
    run_size.check(canaries, memory_limit=2**60)
  assert refused.value.parameter == 'num_canaries'


def test_the_paper_runs_fit_under_the_work_ceiling():
  # configs/stackoverflow.cfg at full size, the largest of the paper's.
  shape = run_size.RunShape(
      total_rounds=2048, num_seen=1000, num_unseen=1000, dim=4_050_748,
      clients_per_round=167, examples_per_client=135_818_730 / 342_477,
      flops_per_example=3.69e8, buffer_rounds=47)
  work = sum(shape.work().values())
  assert 1e16 < work < run_size.MAX_WORK_FLOPS / 10


@pytest.mark.parametrize('clients, canaries, refused', [
    (40, 40, False), (40, 40.5, True), (100, 2, False), (1, 10**7, True)])
def test_canaries_may_be_at_most_half_of_a_round(clients, canaries, refused):
  cohort = clients + canaries
  if refused:
    with pytest.raises(run_size.PlanRefused, match='would be canaries'):
      canary_schedules.check_canary_share(clients, cohort)
  else:
    canary_schedules.check_canary_share(clients, cohort)


def test_the_audit_refuses_its_plan_at_construction():
  from one_shot_epe.tff_engine import audit  # pylint: disable=g-import-not-at-top
  plan = dict(delta=1e-5, rounds=20, clients_per_round=10, num_canaries=20)
  for changes, expected in [
      (dict(num_canaries=1), 'num_canaries must be in [2, 1000000000]'),
      (dict(num_unseen_canaries=1), 'num_unseen_canaries must be in [2,'),
      (dict(rounds=10**9), 'rounds=1000000000: the run needs about'),
      (dict(num_canaries=10**6), 'num_canaries=1000000: 50,000 of the '
       '50,010 expected participants')]:
    with pytest.raises(ValueError) as refused:
      audit.CanaryAudit(**{**plan, **changes})
    assert str(refused.value).startswith(expected), refused.value
  audit.CanaryAudit(**plan)  # 1 canary a round among 10 clients: fine.


def _launcher(root: str, *flags: str) -> subprocess.Popen:
  return subprocess.Popen(
      [sys.executable, '-m', 'experiments.train', '--use_synthetic_data',
       '--synthetic_num_clients=12', '--synthetic_examples_per_client=8',
       '--clients_per_round=3', '--total_rounds=40', '--client_batch_size=4',
       '--noise_multiplier=0.05', '--num_canaries=6',
       '--num_unseen_canaries=6', '--rounds_per_evaluation=20',
       '--rounds_per_checkpoint=2', '--max_eval_examples=16',
       '--noprogress_bar', f'--root_output_dir={root}', '--run_name=run',
       *flags], cwd=_REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, start_new_session=True)


@pytest.mark.slow
@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_stops_in_one_line_and_resumes(tmp_path, signum):
  checkpoints = tmp_path / 'run' / 'checkpoints'
  process = _launcher(str(tmp_path))
  try:
    deadline = time.monotonic() + 240
    # Interrupt once round 2's checkpoint is complete (renamed into place).
    while not (checkpoints / 'program_state_2').exists():
      assert process.poll() is None and time.monotonic() < deadline
      time.sleep(0.2)
    os.killpg(process.pid, signum)  # As a terminal's Ctrl-C: the group.
    _, stderr = process.communicate(timeout=120)
  finally:
    if process.poll() is None:
      os.killpg(process.pid, signal.SIGKILL)
      process.communicate()
  assert process.returncode == 130, stderr
  lines = stderr.strip().splitlines()
  assert 'Traceback' not in stderr, stderr
  saved = re.fullmatch(r'interrupted after round (\d+) of 40; rerun the same '
                       r'command to resume from round \1', lines[-1])
  assert saved, stderr
  # The round the rerun resumes from is on disk (train_resume_test.py
  # reruns such a run to the end against an uninterrupted one).
  assert (checkpoints / f'program_state_{saved.group(1)}').is_dir()

"""Every input is bounded: files read against their limits, sizes before use.

The programs are run as a user runs them, in subprocesses under a memory cap
and a timeout: a flagfile, --config or --cosines that is /dev/zero,
/dev/urandom, a FIFO, a 1 GiB sparse file or a binary (/bin/ls), absurd
sizes of the launcher and of `CanaryAudit`, a resume from an oversized
checkpoint. Each must end with exit status 2 and one line on stderr naming
the file or argument, no traceback, having read no more than its limit.

The cap is RLIMIT_DATA (private writable memory: what a runaway read
fills), not RLIMIT_AS: TensorFlow and JAX reserve address space at start-up
without touching it (about 1.7 GB and 1.0 GB of VmPeak), which an address
space cap would count, while their private data stays under 0.4 GB. A
program that read /dev/zero into memory, as absl's flagfile reader and the
epsilon command line did, dies at the cap with a MemoryError traceback.
"""

import dataclasses
import gzip
import io
import json
import os
import resource
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

from experiments import run_planning
from experiments import train_config
from one_shot_epe.design import tasks
from one_shot_epe.runtime import atomic_io
from one_shot_epe.runtime import bounded_reads
from one_shot_epe.runtime import command_line
from one_shot_epe.runtime import npz_checkpoints
from one_shot_epe.runtime import run_directory

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_JAX_PYTHON = os.path.join(_REPO, '.venv-jax', 'bin', 'python')
# The cap on each program's private writable memory (module docstring).
_MEMORY_CAP = 3 << 29
_GIB = 1 << 30


def _capped() -> None:
  resource.setrlimit(resource.RLIMIT_DATA, (_MEMORY_CAP, _MEMORY_CAP))


def _run(args, python=sys.executable, timeout=180):
  return subprocess.run([python, *args], cwd=_REPO, capture_output=True,
                        text=True, timeout=timeout, check=False,
                        preexec_fn=_capped,
                        env={**os.environ, 'PYTHONPATH': _REPO})


def _assert_refused(done, *names):
  """Exit 2, one line on stderr naming each of `names`, no traceback."""
  lines = done.stderr.strip().splitlines()
  assert done.returncode == 2, done.stderr[-2000:]
  assert len(lines) == 1 and lines[0].startswith('error: '), done.stderr
  assert 'Traceback' not in done.stderr
  for name in names:
    assert str(name) in lines[0], (name, lines[0])


@pytest.fixture(name='bad_files', scope='module')
def _bad_files(tmp_path_factory):
  """Name -> path of each kind of file that is not a small text file."""
  root = tmp_path_factory.mktemp('bad')
  sparse = root / 'sparse.cfg'
  with open(sparse, 'wb') as stream:
    os.truncate(stream.fileno(), _GIB)  # 1 GiB, no block written.
  binary = root / 'binary.cfg'
  binary.write_bytes(b'--total_rounds=3\n\xd0\xcf\x11\xe0\x00\x01')
  fifo = root / 'fifo.cfg'
  os.mkfifo(fifo)
  outer = root / 'outer.cfg'
  outer.write_text('--noise_multiplier=0.1\n--flagfile=/dev/zero\n')
  return {'zero': '/dev/zero', 'urandom': '/dev/urandom',
          'sparse': str(sparse), 'ls': '/bin/ls', 'binary': str(binary),
          'fifo': str(fifo), 'nested': str(outer)}


_EVERY_KIND = ['zero', 'urandom', 'sparse', 'ls', 'binary', 'fifo', 'nested']


@pytest.mark.parametrize('kind', _EVERY_KIND)
def test_train_refuses_a_bad_flagfile_before_absl_reads_it(bad_files, kind,
                                                           tmp_path):
  path = bad_files[kind]
  done = _run(['-m', 'experiments.train', f'--flagfile={path}',
               f'--root_output_dir={tmp_path / "out"}'])
  _assert_refused(done, '--flagfile',
                  '/dev/zero' if kind == 'nested' else path)
  assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('flag,kind', [('config', 'zero'), ('config', 'sparse'),
                                       ('config', 'ls'), ('config', 'nested'),
                                       ('flagfile', 'ls')])
def test_reproduce_refuses_a_bad_config_or_flagfile(bad_files, flag, kind,
                                                    tmp_path):
  path = bad_files[kind]
  done = _run(['-m', 'experiments.reproduce', f'--{flag}={path}',
               f'--output_dir={tmp_path / "grid"}'])
  _assert_refused(done, '--flagfile' if kind == 'nested' else f'--{flag}',
                  '/dev/zero' if kind == 'nested' else path)
  assert not (tmp_path / 'grid').exists()


@pytest.mark.parametrize('kind', ['zero', 'sparse', 'ls', 'fifo'])
def test_the_epsilon_cli_refuses_bad_cosines(bad_files, kind):
  path = bad_files[kind]
  done = _run(['-m', 'one_shot_epe.reporting.epsilon_cli', f'--cosines={path}',
               '--delta=1e-5', '--dim=1000'])
  _assert_refused(done, '--cosines', path)


_SIZES_SCRIPT = textwrap.dedent("""
    import json
    from experiments import run_planning, train_config
    from one_shot_epe.design import audit_checks
    from one_shot_epe.tff_engine import audit_plan
    results = {}
    base = dict(use_synthetic_data=True, synthetic_num_clients=200,
                clients_per_round=40, total_rounds=20, num_canaries=50,
                num_unseen_canaries=50, noise_multiplier=0.1,
                root_output_dir='/nonexistent/out')
    for name, value in [('total_rounds', 10**12),
                        ('synthetic_num_clients', 10**12),
                        ('synthetic_examples_per_client', 10**12),
                        ('max_eval_examples', 10**12),
                        ('client_epochs_per_round', 10**12)]:
      config = train_config.TrainConfig(**{**base, name: value})
      try:
        run_planning.plan_run(config.validate(),
                              config.synthetic_num_clients,
                              run_planning.SUPPORTS['tff'])
        results[name] = 'accepted'
      except train_config.ConfigError as error:
        results[name] = str(error)
    for name, arguments in [
        ('rounds', dict(num_canaries=10**8, rounds=10**12,
                        clients_per_round=10**12)),
        ('num_canaries', dict(num_canaries=10**9, rounds=100,
                              clients_per_round=10**12)),
        ('repetitions', dict(num_canaries=10**7, rounds=1000,
                             clients_per_round=10**12, repetitions=1000)),
        ('clients_per_round', dict(num_canaries=10**6, rounds=10,
                                   clients_per_round=10))]:
      try:
        audit_plan.plan(num_unseen_canaries=None, canary_seed=None,
                        canary_clip=None, mechanism=None,
                        **{'repetitions': None, **arguments})
        results['audit ' + name] = 'accepted'
      except ValueError as error:
        results['audit ' + name] = str(error)
    for dim in (2, 10**12):
      try:
        audit_checks.check_model(dim, 100, 50, 50)
        results[f'model {dim}'] = 'accepted'
      except ValueError as error:
        results[f'model {dim}'] = str(error)
    print(json.dumps(results))
""")


def test_absurd_sizes_are_refused_before_anything_grows_with_them():
  # The launcher's plan and the TFF CanaryAudit's, as their doors make them
  # (framework-free: the TFF audit's plan imports no TensorFlow), under the
  # memory cap: a size used before its check would allocate terabytes.
  done = _run(['-c', _SIZES_SCRIPT])
  assert done.returncode == 0, done.stderr[-3000:]
  results = json.loads(done.stdout.strip().splitlines()[-1])
  for name in ('total_rounds', 'synthetic_num_clients'):
    assert results[name].startswith(f'--{name}='), results[name]
    assert 'of memory' in results[name]
  assert results['synthetic_examples_per_client'].startswith(
      '--synthetic_num_clients=200 with --synthetic_examples_per_client='
      '1000000000000: the run needs about')
  for name in ('max_eval_examples', 'client_epochs_per_round'):
    assert 'floating-point operations' in results[name], results[name]
  assert results['audit rounds'].startswith('rounds=1000000000000: ')
  assert results['audit num_canaries'].startswith('num_canaries=1000000000: ')
  assert 'canary schedule' in results['audit repetitions']
  assert results['audit clients_per_round'].startswith(
      'num_canaries=1000000: ')  # Canaries over half of each round.
  assert results['model 2'].startswith('the model has 2 parameters')
  assert results['model 1000000000000'].startswith(
      'the model has 1,000,000,000,000 parameters: the run needs')


def test_the_launcher_refuses_a_model_too_small_before_any_work(
    monkeypatch, tmp_path):
  # No task has d < 3; one that had would be refused by its flag at the
  # door, before the data, the engine or the run directory.
  entry = tasks.TASKS['emnist_character']
  monkeypatch.setitem(tasks.TASKS, 'emnist_character', dataclasses.replace(
      entry, dim=lambda *widths: 2))
  config = train_config.TrainConfig(
      use_synthetic_data=True, synthetic_num_clients=20, clients_per_round=5,
      total_rounds=2, num_canaries=4, num_unseen_canaries=4,
      root_output_dir=str(tmp_path / 'out')).validate()
  with pytest.raises(train_config.ConfigError) as refused:
    run_planning.check_plan(config)
  assert str(refused.value).startswith(
      '--task=emnist_character: the model has 2 parameters')
  assert not (tmp_path / 'out').exists()


@pytest.mark.skipif(not os.path.exists(_JAX_PYTHON),
                    reason='the JAX environment (.venv-jax) is absent')
def test_a_resume_from_an_oversized_checkpoint_is_refused(tmp_path):
  # A run directory as the JAX launcher leaves it (its config.json), whose
  # newest checkpoint is a 1 GiB sparse file where a few MB of state belong.
  flags = ['--backend=jax', '--use_synthetic_data', '--synthetic_num_clients=20',
           '--clients_per_round=5', '--total_rounds=2', '--num_canaries=4',
           '--num_unseen_canaries=4', '--noise_multiplier=1',
           '--clipping_norm=1', f'--root_output_dir={tmp_path}',
           '--run_name=run', '--noprogress_bar']
  save = textwrap.dedent("""
      import sys
      from absl import flags
      from experiments import train_flags
      from one_shot_epe.runtime import run_directory
      train_flags.define_flags()
      flags.FLAGS(['train', *sys.argv[1:]])
      config = train_flags.config_from_flags().validate()
      run_directory.write_config(config.run_dir, config.to_json_dict())
  """)
  run_dir = tmp_path / 'run'
  (run_dir / 'checkpoints').mkdir(parents=True)
  saved = _run(['-c', save, *flags])
  assert saved.returncode == 0, saved.stderr
  checkpoint = run_dir / 'checkpoints' / 'round_00000002.npz'
  with open(checkpoint, 'wb') as stream:
    os.truncate(stream.fileno(), _GIB)
  before = sorted(os.listdir(run_dir))
  done = _run(['-m', 'experiments.train', *flags], python=_JAX_PYTHON)
  _assert_refused(done, '--run_name', str(checkpoint), 'limit of a checkpoint')
  assert sorted(os.listdir(run_dir)) == before  # Nothing written.


# --- The bounded reader itself, in-process. ---------------------------------


def test_read_text_reads_no_more_than_its_limit(tmp_path):
  limit = bounded_reads.Limit('a test file', 100)
  small = tmp_path / 'small.txt'
  small.write_text('x' * 100)
  assert bounded_reads.read_text(str(small), limit) == 'x' * 100
  small.write_text('x' * 101)
  with pytest.raises(bounded_reads.InputRefused, match='over the 100 bytes'):
    bounded_reads.read_text(str(small), limit, '--f')
  # /proc files report a size of 0: the count of bytes read refuses them.
  with pytest.raises(bounded_reads.InputRefused, match='holds more than'):
    bounded_reads.read_text('/proc/self/maps', limit)
  small.write_bytes(b'ok\x00')
  with pytest.raises(bounded_reads.InputRefused, match='a NUL byte'):
    bounded_reads.read_text(str(small), limit)
  with pytest.raises(bounded_reads.InputRefused, match='is a directory'):
    bounded_reads.read_text(str(tmp_path), limit)


def test_gzip_and_arrays_are_refused_before_they_are_inflated(tmp_path):
  limit = bounded_reads.Limit('a test file', 1 << 20)
  bomb = tmp_path / 'bomb.gz'
  bomb.write_bytes(gzip.compress(bytes(4 << 20)))  # 4 MiB of zeros, 4 kB.
  data = bounded_reads.read_bytes(str(bomb), limit)
  with pytest.raises(bounded_reads.InputRefused, match='decompresses to more'):
    bounded_reads.decompress_gzip(data, str(bomb), limit)
  # An .npy whose header claims 80 TB in a file of a few bytes.
  header = io.BytesIO()
  np.lib.format.write_array_header_1_0(header, {
      'descr': '<f8', 'fortran_order': False, 'shape': (10**13,)})
  header = header.getvalue() + bytes(24)
  array = tmp_path / 'array.npy'
  array.write_bytes(header)
  with pytest.raises(bounded_reads.InputRefused, match='declares an array'):
    bounded_reads.check_npy(str(array), limit)
  # The same array inside an .npz checkpoint.
  archive = tmp_path / 'checkpoints'
  archive.mkdir()
  store = npz_checkpoints.NpzCheckpoints(str(archive))
  store.save({'a': np.zeros(3)}, 0)
  with zipfile.ZipFile(archive / 'round_00000000.npz', 'w') as rewritten:
    rewritten.writestr('a.npy', header)
  with pytest.raises(ValueError, match='declares more than'):
    store.verify()


def test_a_checkpoint_directory_is_summed_against_its_limit(tmp_path):
  version = tmp_path / 'program_state_3'
  (version / 'variables').mkdir(parents=True)
  (version / 'saved_model.pb').write_bytes(b'x' * 10)
  with open(version / 'variables' / 'data', 'wb') as stream:
    os.truncate(stream.fileno(), 300)
  assert bounded_reads.directory_bytes(
      str(version), bounded_reads.Limit('a checkpoint', 310)) == 310
  with pytest.raises(bounded_reads.InputRefused, match='holds more than'):
    bounded_reads.directory_bytes(str(version),
                                  bounded_reads.Limit('a checkpoint', 309))
  os.mkfifo(version / 'fifo')
  with pytest.raises(bounded_reads.InputRefused, match='a FIFO'):
    bounded_reads.directory_bytes(str(version),
                                  bounded_reads.Limit('a checkpoint', 1000))


def test_the_limits_admit_what_the_project_writes(tmp_path):
  # Every flagfile of configs/ passes.
  for name in sorted(os.listdir(os.path.join(_REPO, 'configs'))):
    if name.endswith('.cfg'):
      command_line.check_flagfiles(
          ['prog', f'--flagfile={os.path.join(_REPO, "configs", name)}'])
  # A cosine CSV of 10,000 rows as runs write it, at the longest floats.
  rows = 10**4
  cosines = tmp_path / 'final_cosines.csv'
  longest = -1.2345678901234567e-05
  atomic_io.write_columns_csv(str(cosines), {'cosine': [longest] * rows,
                                             'unseen': [longest] * rows})
  bounded_reads.read_text(str(cosines), bounded_reads.cosine_csv(rows))
  # A per-round CSV of 500 rounds of 20 metrics at the longest floats, as
  # the launcher writes and reads it back on resume.
  metrics = tmp_path / 'metrics.csv'
  fields = ['round'] + [f'client_work/train/metric_number_{i}'
                        for i in range(20)]
  run_directory.write_rounds(
      str(metrics), fields,
      [{'round': t, **{name: longest for name in fields[1:]}}
       for t in range(501)],
      run_directory.CsvFormat(sort_new_columns=True, line_terminator='\r\n'))
  assert len(run_directory.read_rounds(str(metrics), 500, 500)[1]) == 501


def test_nested_flagfiles_share_one_limit(tmp_path):
  chain = []
  for i in range(3):
    path = tmp_path / f'part{i}.cfg'
    chain.append(path)
    inner = f'--flagfile={tmp_path / f"part{i + 1}.cfg"}\n' if i < 2 else ''
    path.write_text(inner + '#' * (400 << 10) + '\n')  # 400 KiB each.
  with pytest.raises(bounded_reads.InputRefused) as refused:
    command_line.check_flagfiles(['prog', f'--flagfile={chain[0]}'])
  assert f"(in '{chain[1]}') '{chain[2]}'" in str(refused.value)
  # A circular flagfile is skipped, as absl skips it.
  loop = tmp_path / 'loop.cfg'
  loop.write_text(f'--flagfile={loop}\n--seed=1\n')
  command_line.check_flagfiles(['prog', '--flagfile', str(loop)])


def test_an_unwritable_output_directory_is_tried_not_inferred():
  # This process may hold every permission bit (root); /proc/sys still
  # refuses a new directory, which only trying shows.
  with pytest.raises(run_directory.RunDirectoryError, match='not writable'):
    run_directory.check_writable('/proc/sys/x/run')

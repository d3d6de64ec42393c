"""Tests of scripts/device_check.py, the prepared command for a lent GPU.

Independent truths: hand-made run directories whose cosine differences are
known; a wheel built here by hand (zip, METADATA, WHEEL, RECORD) that pip
must install offline while a distribution already installed is skipped; a
process tree whose grandchild must be gone after a step's time cap; the
pins of requirements-jax.txt, which the carried wheels and the image's
rehearsed packages must not contradict. The whole check, end to end in a
fresh environment of the image's packages, is `make device-check-cpu`
(scripts/device_env.py).
"""

import csv
import importlib.util
import os
import re
import subprocess
import sys
import time
import zipfile

import psutil
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _load(name: str):
  spec = importlib.util.spec_from_file_location(
      name, os.path.join(REPO, 'scripts', f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


device_check = _load('device_check')


def _write_run(directory, cosines: list[float], seconds: float) -> None:
  os.makedirs(directory)
  for name in device_check.COSINE_FILES:
    with open(os.path.join(directory, name), 'w', newline='',
              encoding='utf-8') as stream:
      writer = csv.writer(stream)
      writer.writerow(['round', 'cosine', 'training_time_in_seconds', 'note'])
      for i, value in enumerate(cosines):
        writer.writerow([i + 1, value, seconds, 'text'])


def test_cosines_agree_within_the_tolerance_and_report_the_largest_gap(
    tmp_path):
  _write_run(tmp_path / 'cpu', [0.1, -0.2, float('nan')], 1.0)
  _write_run(tmp_path / 'device', [0.1005, -0.2, float('nan')], 9.0)
  found = device_check.compare_cosines(str(tmp_path / 'device'),
                                       str(tmp_path / 'cpu'), 1e-3, 0.0)
  # Per file: the round and cosine columns of two rows (the NaN pair and
  # the times are left out); 3 files.
  assert found['values'] == 3 * 5
  assert found['max_abs_diff'] == pytest.approx(5e-4)
  assert found['ok'] and found['disagreeing'] == 0
  found = device_check.compare_cosines(str(tmp_path / 'device'),
                                       str(tmp_path / 'cpu'), 1e-4, 0.0)
  assert not found['ok'] and found['disagreeing'] == 3


def test_cosines_of_runs_of_different_lengths_disagree(tmp_path):
  _write_run(tmp_path / 'cpu', [0.1, 0.2], 1.0)
  _write_run(tmp_path / 'device', [0.1], 1.0)
  found = device_check.compare_cosines(str(tmp_path / 'device'),
                                       str(tmp_path / 'cpu'), 1.0, 1.0)
  assert not found['ok'] and 'rows' in found['error']


def _wheel(directory, distribution: str, module: str) -> str:
  """A pure-Python wheel of `distribution` holding `module`.py."""
  name = f'{distribution}-1.0-py3-none-any.whl'
  info = f'{distribution}-1.0.dist-info'
  files = {f'{module}.py': 'VALUE = 42\n',
           f'{info}/METADATA': (f'Metadata-Version: 2.1\nName: {distribution}'
                                '\nVersion: 1.0\n'),
           f'{info}/WHEEL': ('Wheel-Version: 1.0\nGenerator: hand\n'
                             'Root-Is-Purelib: true\nTag: py3-none-any\n')}
  record = ''.join(f'{path},,\n' for path in files) + f'{info}/RECORD,,\n'
  with zipfile.ZipFile(os.path.join(directory, name), 'w') as archive:
    for path, text in files.items():
      archive.writestr(path, text)
    archive.writestr(f'{info}/RECORD', record)
  return name


def test_only_wheels_of_missing_distributions_are_installed(tmp_path):
  wheels = tmp_path / 'wheels'
  wheels.mkdir()
  missing = _wheel(wheels, 'one_shot_epe_carried_probe', 'carried_probe')
  present = _wheel(wheels, 'pytest', 'not_pytest')  # pytest is installed.
  site = tmp_path / 'site'
  found = device_check.install_wheels(str(wheels), str(site))
  assert found == {'installed': [missing], 'present': [present]}
  completed = subprocess.run(
      [sys.executable, '-c',
       'import carried_probe; print(carried_probe.VALUE)'],
      env=dict(os.environ, PYTHONPATH=str(site)), capture_output=True,
      text=True, check=True)
  assert completed.stdout.strip() == '42'
  assert not (site / 'not_pytest.py').exists()
  assert device_check.install_wheels(str(tmp_path / 'none'), str(site)) == {
      'installed': [], 'present': []}


def test_a_step_past_its_cap_is_killed_with_its_children():
  script = ('import subprocess, sys, time\n'
            'child = subprocess.Popen([sys.executable, "-c", '
            '"import time; time.sleep(60)"])\n'
            'print(child.pid, flush=True)\n'
            'time.sleep(60)\n')
  log = []
  start = time.monotonic()
  result = device_check.run_step([sys.executable, '-c', script], 3.0,
                                 os.environ, log, 'sleeper')
  assert time.monotonic() - start < 30
  assert result['timed_out'] and not result['ok']
  grandchild = int(result['stdout'].split()[0])
  time.sleep(0.5)
  try:
    assert psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    pass
  assert 'sleeper' in log[0] and 'timed out' in log[0]


def test_a_step_that_fails_does_not_stop_the_check(tmp_path):
  result = device_check.run_step(
      [sys.executable, '-c', 'import sys; print("x"); sys.exit(3)'], 30.0,
      os.environ, [], 'failing')
  assert result['returncode'] == 3 and not result['ok']
  assert not result['timed_out']


def test_unknown_steps_and_budgets_are_refused(capsys):
  with pytest.raises(SystemExit) as error:
    device_check.parse_args(['--out=x', '--steps=tests,gpu'])
  assert error.value.code == 2
  assert '--steps' in capsys.readouterr().err
  with pytest.raises(SystemExit):
    device_check.parse_args(['--out=x', '--budget_s=0'])
  with pytest.raises(SystemExit):
    device_check.parse_args(['--out=x', '--cap_scale=-1'])


def test_the_table_puts_each_measured_round_beside_its_prediction():
  figures = {'device': 'H100', 'steps': {
      'paper_scale': {'ok': True, 'seconds': 100.0, 'tasks': {'emnist': {
          'round_s_gpu_jax': 0.125, 'predicted_h100_round_s': 0.21,
          'round_s_measured_clients': 101, 'compile_s_jax': 12.5,
          'peak_device_bytes': 3 * 2**20, 'padding_ratio_vmap': 1.1442,
          'h2d_bytes_per_round': 2**21}}},
      'cosines': {'ok': False, 'timed_out': True, 'seconds': 90.0}}}
  table = device_check.markdown(figures)
  row = next(line for line in table.splitlines()
             if line.startswith('| emnist'))
  assert row.split(' | ')[1:] == ['0.125', '0.21', '101', '12.5', '3.0 MiB',
                                  '1.144', '2.0 MiB |']
  assert '| cosines | timed out | 90 |' in table


def _pins(path: str) -> dict[str, str]:
  pins = {}
  with open(os.path.join(REPO, path), encoding='utf-8') as stream:
    for line in stream:
      match = re.match(r'^([A-Za-z0-9_.-]+)==(\S+)', line)
      if match:
        pins[re.sub(r'[-_.]+', '-', match.group(1).lower())] = match.group(2)
  return pins


def test_carried_and_image_pins_are_requirements_jax_pins():
  tested = _pins('requirements-jax.txt')
  for path in ('requirements-device.txt', 'requirements-device-image.txt'):
    pins = _pins(path)
    assert pins, path
    assert {name: tested.get(name) for name in pins} == pins, path
  # The engine's own extra needs dp-accounting and jax-privacy: carried.
  assert {'dp-accounting', 'jax-privacy'} <= set(_pins(
      'requirements-device.txt'))

"""Tests of experiments/seed_band.py: the seeds' band and its comparisons.

The band's statistics against numpy's, lscpu's fields against a hand-written
listing, the verdicts against hand-placed numbers, and the README's and
docs/reproducing.md's band against the stored seeds' table of the demo.
"""

import csv
import os
import re

import numpy as np
import pytest

from experiments import seed_band
from one_shot_epe.runtime import bounded_reads

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DEMO_TABLE = os.path.join(_REPO, 'configs', 'demo_fashion_mnist_seeds.csv')

_LSCPU = """Architecture:                            x86_64
Model name:                              AMD EPYC
CPU family:                              23
Flags:                                   fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 smep avx512f avx512bw
"""


def _rows(values_by_seed, noise='0.5', repeats='1'):
  """Rows of a seeds' table with est-fin values `values_by_seed`."""
  rows = []
  for seed, value in enumerate(values_by_seed):
    row = {name: '' for name in ('analyt.', 'acct.', 'est-all', 'lo-all',
                                 'lo-fin', 'any-fin', 'gdp-fin', 'last-it',
                                 'acc.')}
    row.update({'seed': str(seed), 'noise_multiplier': noise,
                'canary_repeats': repeats, 'est-fin': repr(value),
                'analyt.': '24.68', 'cpu_model': 'M', 'cpu_family': '1',
                'vector_extensions': 'avx2'})
    rows.append(row)
  return rows


def test_machine_reads_model_family_and_vector_extensions():
  fields = seed_band.machine(_LSCPU)
  assert fields == {'cpu_model': 'AMD EPYC', 'cpu_family': '23',
                    'vector_extensions':
                        'fma sse4_2 avx avx2 avx512f avx512bw'}


def test_band_statistics_are_numpys():
  values = [3.42, 3.1, 3.9, 2.75, 3.33, 3.61]
  band = seed_band.bands(_rows(values))[(0.5, 1)]['est-fin']
  assert band.count == 6
  assert band.mean == pytest.approx(np.mean(values), rel=1e-15)
  assert band.sd == pytest.approx(np.std(values, ddof=1), rel=1e-14)
  assert (band.low, band.high) == (min(values), max(values))
  # Columns no seed has are left out.
  assert 'est-all' not in seed_band.bands(_rows(values))[(0.5, 1)]


def test_band_table_cells():
  table = seed_band.band_table(_rows([1.0, 2.0, 3.0]))
  header, _, row = table.splitlines()
  assert header.startswith('| z | r | seeds | analyt. |')
  cells = [cell.strip() for cell in row.strip('|').split('|')]
  names = [name.strip() for name in header.strip('|').split('|')]
  by_name = dict(zip(names, cells))
  assert by_name['seeds'] == '3'
  assert by_name['est-fin'] == '2 ± 1 (1–3)'
  assert by_name['analyt.'] == '24.68'  # Every seed agrees: one number.
  assert by_name['acc.'] == 'n/a'


def test_infinite_values_agreeing_have_no_spread():
  rows = _rows([1.0, 2.0])
  for row in rows:
    row['analyt.'] = 'inf'
  band = seed_band.bands(rows)[(0.5, 1)]['analyt.']
  assert band.low == band.high == np.inf and band.sd == 0.0
  assert band.holds(np.inf) and not band.holds(24.0)


@pytest.mark.parametrize('value, verdict', [(1.0, 'within'), (3.0, 'within'),
                                            (2.2, 'within'),
                                            (0.999, 'outside'),
                                            (3.001, 'outside')])
def test_a_value_is_within_the_seeds_range_only(value, verdict):
  band = seed_band.bands(_rows([1.0, 3.0, 2.0]))[(0.5, 1)]['est-fin']
  assert ('within' if band.holds(value) else 'outside') == verdict


def test_the_stored_demo_table_is_a_seeds_table_of_the_demo_grid():
  rows = seed_band.read_table(_DEMO_TABLE)
  seeds = {row['seed'] for row in rows}
  points = {(float(row['noise_multiplier']), int(row['canary_repeats']))
            for row in rows}
  assert len(seeds) >= 5
  assert points == {(0.0, 1), (0.0487, 1), (0.2207, 1)}
  assert len(rows) == len(seeds) * len(points)
  for row in rows:
    assert row['cpu_model'] and row['cpu_family']
  with open(_DEMO_TABLE, newline='', encoding='utf-8') as stream:
    header = next(csv.reader(stream))
  assert header[-3:] == list(seed_band.MACHINE_FIELDS)


@pytest.mark.parametrize('page', ['README.md', 'docs/reproducing.md'])
def test_the_docs_band_is_the_stored_tables(page):
  band = seed_band.band_table(seed_band.read_table(_DEMO_TABLE))
  with open(os.path.join(_REPO, page), encoding='utf-8') as stream:
    text = stream.read()
  assert band in text, f'{page} does not show the band of {_DEMO_TABLE}'


@pytest.mark.parametrize('path', ['/dev/zero', '/bin/sh'])
def test_a_file_that_is_not_a_text_table_is_refused_before_it_is_read(path):
  # /dev/zero would never end; /bin/sh is not UTF-8 text.
  with pytest.raises(bounded_reads.InputRefused, match=re.escape(repr(path))):
    seed_band.read_table(path)

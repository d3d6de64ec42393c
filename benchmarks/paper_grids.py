"""The paper's grids of runs, and the round that stands for each (no flags).

The paper's experiments (Andrew et al., ICLR 2024, Sec. 5) are grids of
whole DP-FedAvg runs:

* 'emnist': Table 4 (Sec. 5.2.1, configs/emnist.cfg): 4 noise multipliers x
  4 canary repetitions = 16 runs of 510 rounds (15 epochs over the 3,383
  writers at 101 clients per round) of the 1,206,590-parameter CNN;
* 'stackoverflow': Table 3 (Sec. 5.1, configs/stackoverflow.cfg): 16 runs of
  2,048 rounds of 167 clients of the 4,050,748-parameter LSTM;
* 'table5': Table 5 (Sec. 5.3): per noise multiplier (two), 50 experiments of
  one run with 1,000 canaries and 10 runs with 100: 1,100 StackOverflow runs
  of 2,048 rounds (its rounds cost what Table 3's do: it reuses the
  'stackoverflow' measurement);
* 'shakespeare': not the paper's: configs/shakespeare.cfg's grid
  (docs/shakespeare.md), 3 noise multipliers = 3 runs of 213 rounds of 20 of
  the 1,419 (play, role) clients with the StackOverflow LSTM, each role
  capped at 64 examples a round.

`paper_grid` reads a table's runs and rounds from its config's grid lines;
`launcher_run` is the two-round run whose second round
`benchmarks.paper_scale` measures for it, with the config's own flags, and
`measured_clients` its cohort.
"""

import dataclasses
import math

from benchmarks import round_timing
from experiments import grid
from one_shot_epe.runtime import bounded_reads


@dataclasses.dataclass(frozen=True)
class PaperGrid:
  """One of the paper's tables: its runs and the round they repeat.

  Attributes:
    table: the paper's name for it.
    kind: the task whose round the runs repeat.
    config: the flagfile of the runs.
    runs: runs in the table.
    rounds: rounds of each run.
  """
  table: str
  kind: str
  config: str
  runs: int
  rounds: int


# Real training clients of the paper's EMNIST (Sec. 5.2.1: 3,383 writers),
# which with --train_epochs make the rounds of configs/emnist.cfg.
_EMNIST_WRITERS = 3383
# Table 5 (Sec. 5.3): two noise multipliers, 50 experiments each of one run
# with all canaries and 10 runs with a tenth of them.
_TABLE5_RUNS = 2 * 50 * (1 + 10)
# Mean examples of a synthetic client (the real training splits': 197.5 and
# 396.6, `client_arrays.EMNIST_WRITER_SIZES`, `STACKOVERFLOW_USER_SIZES`).
MEAN_EXAMPLES = {'emnist': 198, 'stackoverflow': 397}
# The task whose round each table repeats, and each task's flagfile.
KINDS = {'emnist': 'emnist', 'stackoverflow': 'stackoverflow',
         'table5': 'stackoverflow', 'shakespeare': 'shakespeare'}
CONFIGS = {'emnist': 'configs/emnist.cfg',
           'stackoverflow': 'configs/stackoverflow.cfg',
           'shakespeare': 'configs/shakespeare.cfg'}
_TABLES = {'emnist': 'Table 4', 'stackoverflow': 'Table 3',
           'shakespeare': 'Shakespeare grid'}
# Flags the measurement sets itself (`round_timing.LauncherRun.flags`).
_OVERRIDDEN = ('train_epochs', 'total_rounds', 'clients_per_round',
               'max_examples_per_client', 'num_canaries',
               'num_unseen_canaries', 'noise_multiplier',
               'rounds_per_evaluation', 'rounds_per_checkpoint',
               'max_eval_examples')


def config_flags(path: str) -> dict[str, str]:
  """The flag lines of a flagfile: each flag's name -> value ('' for bare).

  Args:
    path: The flagfile.

  Returns:
    The name and value of each line that starts with two dashes, in order.
  """
  found = {}
  for line in bounded_reads.read_text(path, bounded_reads.FLAGFILES,
                                      '--flagfile').splitlines():
    line = line.strip()
    if line.startswith('--'):
      name, _, value = line[2:].partition('=')
      found[name] = value
  return found


def paper_grid(task: str) -> PaperGrid:
  """The runs and rounds of `task`'s table, from its config's grid lines.

  Args:
    task: 'emnist', 'stackoverflow', 'table5' or 'shakespeare' (`KINDS`).

  Returns:
    The table's grid.
  """
  kind = KINDS[task]
  config = CONFIGS[kind]
  path = f'{round_timing.REPO}/{config}'
  values = config_flags(path)
  if 'total_rounds' in values:
    rounds = int(values['total_rounds'])
  else:
    rounds = int(values['train_epochs']) * math.ceil(
        _EMNIST_WRITERS / int(values['clients_per_round']))
  if task == 'table5':
    return PaperGrid('Table 5', kind, config, _TABLE5_RUNS, rounds)
  runs = math.prod(len(v) for v in grid.parse_grid(path).values())
  return PaperGrid(_TABLES[kind], kind, config, runs, rounds)


def launcher_run(kind: str, clients: int) -> round_timing.LauncherRun:
  """The measured run of `kind`: its config's flags, one compiling round.

  Two rounds of `clients` clients; canaries at the config's rate (its seen
  canaries over its rounds, at least 2); the grid's smallest non-zero noise.
  Shakespeare's on its real roles with the config's example cap, the
  others' on synthetic clients without a cap (the paper states none).

  Args:
    kind: The task kind ('emnist', 'stackoverflow', 'shakespeare').
    clients: Clients per round.

  Returns:
    The run to measure.
  """
  path = f'{round_timing.REPO}/{CONFIGS[kind]}'
  config = config_flags(path)
  noise = min(float(z) for z in grid.parse_grid(path)['noise_multiplier']
              if float(z) > 0)
  task_flags = tuple(f'--{name}={value}' if value else f'--{name}'
                     for name, value in config.items()
                     if name not in _OVERRIDDEN)
  rounds = 2
  canaries = max(2, round(int(config['num_canaries']) * rounds /
                          paper_grid(kind).rounds))
  real = kind == 'shakespeare'
  return round_timing.LauncherRun(
      task_flags=task_flags, kind=kind, clients=clients, rounds=rounds,
      examples_per_client=0 if real else MEAN_EXAMPLES[kind],
      max_examples=int(config['max_examples_per_client']) if real else -1,
      num_canaries=canaries, noise_multiplier=noise, synthetic=not real)


def measured_clients(kind: str, stackoverflow_clients: int,
                     max_clients: int | None) -> int:
  """Clients of the measured round: the paper's, or the reduced cohort.

  Args:
    kind: The task kind ('emnist', 'stackoverflow', 'shakespeare').
    stackoverflow_clients: At most this many clients in a StackOverflow round.
    max_clients: At most this many in any round (None: no cap).

  Returns:
    The number of clients of the measured round.
  """
  cohort = int(config_flags(f'{round_timing.REPO}/{CONFIGS[kind]}')[
      'clients_per_round'])
  if kind == 'stackoverflow':
    cohort = min(cohort, stackoverflow_clients)
  return min(cohort, max_clients or cohort)

"""Console scripts of the installed package (pyproject.toml [project.scripts]).

`pip install .` puts one-shot-epe-train, one-shot-epe-reproduce and
one-shot-epe-estimate on PATH. Each runs its launcher module exactly as
`python -m <module>` does (`runpy`, the machinery behind -m): the module runs
as __main__, so its `if __name__ == '__main__'` block defines the flags, sets
the TensorFlow log level and calls absl's `app.run`, and no launcher logic is
repeated here.
"""

import runpy

__all__ = ['ESTIMATE_MODULE', 'REPRODUCE_MODULE', 'TRAIN_MODULE', 'estimate',
           'reproduce', 'train']

TRAIN_MODULE = 'experiments.train'
REPRODUCE_MODULE = 'experiments.reproduce'
ESTIMATE_MODULE = 'one_shot_epe.reporting.epsilon_cli'


def _run_as_main(module: str) -> None:
  """Runs `module` as `python -m module` would, with this process's argv."""
  runpy.run_module(module, run_name='__main__', alter_sys=True)


def train() -> None:
  """one-shot-epe-train: DP-FedAvg with canaries (experiments/train.py)."""
  _run_as_main(TRAIN_MODULE)


def reproduce() -> None:
  """one-shot-epe-reproduce: the paper's grids and tables (reproduce.py)."""
  _run_as_main(REPRODUCE_MODULE)


def estimate() -> None:
  """one-shot-epe-estimate: a report from a CSV of cosines (epsilon_cli.py)."""
  _run_as_main(ESTIMATE_MODULE)

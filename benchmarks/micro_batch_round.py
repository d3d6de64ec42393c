"""Whole batches against micro-batches in the CPU's 'loop' round (Shakespeare).

`packing.run_layout` cuts a 'vmap' run's batches into micro-batches where
partial batches dominate (Shakespeare: steps of 4 examples). Whether the
CPU's 'loop' strategy should too is measured here: the same rounds of 20
real roles (at most 64 examples each, batches of 16, the config's LSTM and
optimizers) on `RoundEngine(local_training='loop')` with whole batches (the
baseline) and with micro-batches of 8 and 4 (`set_micro_batch`), each
engine timed over the same rounds after one compiling round, in one run.
Prints each setting's median round, padding (processed / real examples) and
its ratio to whole batches.

  .venv-jax/bin/python -m benchmarks.micro_batch_round [rounds] [--tiny]

--tiny (benchmarks/tiny.py): one timed round of 2 roles, micro-batches of 4,
a toy LSTM (8 units, 100 words).
"""

import statistics
import sys
import time

import numpy as np


def main(argv: list[str]) -> None:
  """Prints the rounds' medians and ratios, for whole batches, 8 and 4.

  Args:
    argv: `sys.argv`: the program's name, then optionally the number of
      timed rounds (default 4, --tiny 1; one more runs first and compiles)
      and --tiny.
  """
  # pylint: disable=g-import-not-at-top
  import jax
  from one_shot_epe.data import shakespeare
  from one_shot_epe.design import canary_spec
  from one_shot_epe.jax_engine import compat
  from one_shot_epe.jax_engine import data
  from one_shot_epe.jax_engine import models
  from one_shot_epe.jax_engine import optimizers
  from one_shot_epe.jax_engine import round_engine
  # pylint: enable=g-import-not-at-top
  small = '--tiny' in argv[1:]
  numbers = [arg for arg in argv[1:] if arg != '--tiny']
  rounds = int(numbers[0]) if numbers else (1 if small else 4)
  cohort, micro_batches = (2, (4,)) if small else (20, (None, 8, 4))
  model = models.InVocabWordLstm(**(
      dict(vocab_size=100, embedding_size=8, lstm_size=8) if small else
      dict(vocab_size=10_000)))
  train, _ = shakespeare.client_arrays_of(
      shakespeare.load(vocab_size=model.vocab_size))
  config = canary_spec.DPAggregation(noise_multiplier=0.0,
                                     clients_per_round=float(cohort),
                                     initial_clip=1.0)
  cohorts = [np.random.default_rng(t).choice(len(train.client_ids), cohort,
                                             replace=False)
             for t in range(rounds + 1)]
  baseline = None
  print(f'{"step":>6}{"median round (s)":>18}{"padding":>9}'
        f'{"/ whole batches":>17}')
  for micro in micro_batches:
    engine = round_engine.RoundEngine(
        model.loss, optimizers.Optimizer('sgd', 1.0),
        optimizers.Optimizer('sgdm', 0.56, momentum=0.9), config,
        client_dropout=False, local_training='loop')
    engine.set_micro_batch(micro)
    state = engine.init_state(model.init(compat.prng_key(0)))
    seconds, padded, real = [], 0, 0
    for t, clients in enumerate(cohorts):
      batches = data.client_batches(
          train, clients, batch_size=16, epochs=1, max_examples=64,
          rng=np.random.default_rng(t), num_slots=cohort, max_batches=4)
      start = time.perf_counter()
      state, output = engine(state, batches,
                             np.zeros((1, model.num_parameters()), np.float32),
                             np.zeros(1, np.float32), compat.prng_key(t))
      jax.block_until_ready(output.aggregate)
      if t:  # Round 0 compiles.
        seconds.append(time.perf_counter() - start)
        padded += engine.padded_examples(batches)
        real += int(batches.example_mask.sum())
    median = statistics.median(seconds)
    baseline = baseline or median
    print(f'{micro or 16:>6}{median:>18.3f}{padded / real:>9.3f}'
          f'{median / baseline:>17.3f}')


if __name__ == '__main__':
  main(sys.argv)

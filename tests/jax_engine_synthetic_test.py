"""The JAX engine learns the synthetic stand-ins (`--use_synthetic_data`).

Independent truth: chance accuracy on the synthetic test split (1/62 for
EMNIST, about 1/104 for StackOverflow's next word). A test split drawn from
other class templates than the training split's (as once) stays at chance.
"""

import pytest

import synthetic_runs
from experiments import train


@pytest.mark.slow
@pytest.mark.parametrize('task, accuracy', [
    ('emnist_character', synthetic_runs.EMNIST_ACCURACY),
    ('stackoverflow_word', synthetic_runs.STACKOVERFLOW_ACCURACY)])
def test_a_synthetic_run_learns_well_above_chance(tmp_path, task, accuracy):
  result = train.run_training(
      synthetic_runs.config('jax', task, str(tmp_path)))
  assert result.accuracy > accuracy

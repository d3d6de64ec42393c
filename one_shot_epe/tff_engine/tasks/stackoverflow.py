"""StackOverflow next-word prediction with the LSTM of Reddi et al. (2020).

The paper's StackOverflow experiments (Section 5.1, Table 3) use "the StackOverflow
word prediction data/model of Reddi et al. [2020]", a word LSTM with about 4.1M
parameters. TFF's baseline `create_recurrent_model` is that model: a 10,000-word
vocabulary plus 4 special tokens (padding, one out-of-vocabulary bucket, beginning
and end of sentence), embedding 96, one LSTM layer of 670 units, dense 96, dense to
the 10,004 logits:

  96 V + 4 * 670 * (96 + 670 + 1) + (670 * 96 + 96) + (96 V + V) = 4,050,748
  for V = 10,004.

Preprocessing (TFF's `word_prediction_preprocessing`): shuffle (buffer 1,000),
repeat for the client epochs, take `max_examples_per_client` sentences, map each
sentence to [bos] + the first 20 token ids (+ [eos] when shorter), pad to 21,
batch, and split into 20 input and 20 target tokens. Model, preprocessing, loss
and the masked accuracy metrics come from TFF's
`create_word_prediction_task_from_datasets`. TFF's `create_word_prediction_task`
is not used: it loads the vocabulary without `cache_dir`, i.e. from the network.
"""

import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_tasks

from one_shot_epe import validation
from one_shot_epe.tff_engine.tasks import base
from one_shot_epe.tff_engine.tasks import tff_cache

__all__ = ['NUM_OUT_OF_VOCAB_BUCKETS', 'SEQUENCE_LENGTH', 'TASK_NAME',
           'VOCAB_SIZE', 'create_task', 'load_client_data']

TASK_NAME = 'stackoverflow_word'
VOCAB_SIZE = tff.simulation.baselines.stackoverflow.DEFAULT_WORD_VOCAB_SIZE
SEQUENCE_LENGTH = tff.simulation.baselines.stackoverflow.DEFAULT_SEQUENCE_LENGTH
NUM_OUT_OF_VOCAB_BUCKETS = 1


@validation.arguments('vocab_size')
def load_client_data(
    data_dir: str | None, vocab_size: int = VOCAB_SIZE
) -> tuple[tff.simulation.datasets.ClientData, tff.simulation.datasets.ClientData,
           tff.simulation.datasets.ClientData, list[str]]:
  """Loads StackOverflow (train, heldout, test, vocab) from `data_dir`, offline.

  The vocabulary is the `vocab_size` most frequent words of
  `stackoverflow.word_count`; the clients come from `stackoverflow.sqlite`.

  Args:
    data_dir: Holds stackoverflow.sqlite and the word counts.
    vocab_size: The vocabulary's size.

  Returns:
    (train, heldout, test, the vocabulary, most frequent first).

  Raises:
    FileNotFoundError / ValueError: see `tff_cache.verify_sqlite` and
      `tff_cache.read_word_counts`.
  """
  cache_dir = tff_cache.verify_sqlite(data_dir, tff_cache.STACKOVERFLOW)
  vocab = tff_cache.read_word_counts(cache_dir, vocab_size)
  with tff_cache.no_download():
    train, heldout, test = tff.simulation.datasets.stackoverflow.load_data(
        cache_dir=cache_dir)
  return train, heldout, test, vocab


def create_task(train_client_spec: tff.simulation.baselines.ClientSpec,
                train_data: tff.simulation.datasets.ClientData,
                heldout_data: tff.simulation.datasets.ClientData,
                test_data: tff.simulation.datasets.ClientData,
                vocab: list[str],
                data_source: str) -> base.Task:
  """Wraps TFF's StackOverflow next-word baseline task around the given data.

  Args:
    train_client_spec: client epochs, batch size and example cap for training.
    train_data: federated data with TFF's StackOverflow element structure
      (creation_date, score, tags, title, tokens, type), real or synthetic.
    heldout_data: the held-out users (TFF's validation split).
    test_data: the test split; evaluated centrally in batches of 64.
    vocab: the vocabulary, most frequent word first.
    data_source: recorded in the returned task ('synthetic' or a directory).

  Returns:
    The task: TFF's LSTM, its preprocessing, the data and d.
  """
  baseline = word_prediction_tasks.create_word_prediction_task_from_datasets(
      train_client_spec=train_client_spec,
      eval_client_spec=None,
      sequence_length=SEQUENCE_LENGTH,
      vocab=list(vocab),
      num_out_of_vocab_buckets=NUM_OUT_OF_VOCAB_BUCKETS,
      train_data=train_data,
      test_data=test_data,
      validation_data=heldout_data,
  )
  return base.Task.from_baseline(TASK_NAME, baseline, data_source)

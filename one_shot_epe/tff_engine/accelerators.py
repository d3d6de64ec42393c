"""Where the launcher's own TensorFlow work runs: CPU or GPU.

Two kinds of TensorFlow work make up a run. Client training and the server
update run inside TFF's C++ workers; TFF 0.87's `worker_binary` (the one in
the pip package) is built without CUDA ("TensorFlow was not compiled with CUDA
or ROCm support" is among its strings), so they run on the CPU unless the
launcher is pointed at workers built from TFF's source with CUDA
(`--tff_worker_addresses`). The canary work of the method — regenerating
every canary and taking its cosine with each round's noised aggregate
(Algorithm 3) and with the final model (Algorithm 2) — runs in the launcher
process, and `--accelerator=gpu` places it on the first GPU that this
process's TensorFlow sees. This is where an accelerator pays off: per round
it is a [B, d] x [d, 2k] product over regenerated canaries.
"""

import tensorflow as tf

from one_shot_epe.design import run_options

__all__ = ['ACCELERATORS', 'launcher_device']

ACCELERATORS = run_options.ACCELERATORS


def launcher_device(accelerator: str) -> str:
  """The TF device of the launcher's canary work for `accelerator`.

  Args:
    accelerator: The --accelerator value, one of `ACCELERATORS`.

  Returns:
    '/CPU:0' or '/GPU:0'.

  Raises:
    ValueError: naming --accelerator, for an unknown value or a GPU request
      in a process whose TensorFlow sees no GPU.
  """
  if accelerator not in ACCELERATORS:
    raise ValueError(f'--accelerator must be one of {list(ACCELERATORS)}; got '
                     f'{accelerator!r}.')
  if accelerator == 'cpu':
    return '/CPU:0'
  if not tf.config.list_logical_devices('GPU'):
    raise ValueError('--accelerator=gpu: TensorFlow in this process sees no '
                     'GPU (a CUDA build of tensorflow and a visible device are '
                     'needed); use --accelerator=cpu.')
  return '/GPU:0'

"""Runs a grid's runs as Ray tasks, on this machine or a cluster (Section 5).

`experiments.reproduce --executor=ray` hands each run of its grid (every
noise multiplier and repetition count, the accuracy baselines, Table 5's
runs) to `RayExecutor`: one Ray task per program (`experiments.grid.programs`:
one run, or up to --runs_per_program runs trained as one), which trains (or
resumes) the ordinary runs (`experiments.grid.train_unless_reported`), each
in its own run directory under the shared --output_dir. The driver then reads every run
back from that directory exactly as the sequential executor does, so the
tables and figures are the same bytes.

Each task takes one CPU of a node, and with --accelerator=gpu one GPU too
(Ray schedules a run where they are free, one run per GPU at a time).
A task whose worker process dies (killed, out of memory, its node lost) is
retried up to `max_retries` times; the retry resumes the run from its last
checkpoint, and the run's lock (`one_shot_epe.runtime.run_lock`, released by the
kernel when its holder dies) lets it in. Every file a run writes is written
atomically (`one_shot_epe.runtime.atomic_io`), so a killed task leaves no file half
written. An exception raised by a run (a bad flag, a failed write) is not
retried: it reaches the driver as itself.

Ctrl-C or SIGTERM in the driver cancels the unfinished tasks the way Ray
cancels a running task (`ray.cancel`, not forced: a `KeyboardInterrupt` in
the task, which saves each of its runs after its last completed round,
`experiments.train.run_program`; a queued task never starts; a cancelled
task is not retried) and waits for them to end before the driver stops
with one line naming each unfinished run and the round its newest
checkpoint holds. A second interrupt stops the waiting; the line then
names what was saved by then. (A terminal's Ctrl-C also reaches the
workers of a local cluster, which share the driver's process group; the
effect is the same.)

Ray is imported here only, and this module only with --executor=ray.
`connect` checks what a bad --ray_address or a missing Ray would break
before anything is written: `train_config.ConfigError` naming the flag.
"""

import os
import socket
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from experiments import train
from experiments import train_config
from one_shot_epe.runtime import interrupts
from one_shot_epe.runtime import run_directory

__all__ = ['DEFAULT_MAX_RETRIES', 'MIN_RAY_VERSION', 'RayExecutor', 'connect']

T = TypeVar('T')

# Retries of a run whose worker died; each resumes from the last checkpoint.
DEFAULT_MAX_RETRIES = 3
# How long the driver waits for interrupted tasks to save their runs.
_STOP_TIMEOUT_SECONDS = 600.0
# The oldest Ray this module accepts: the first with Python 3.11 wheels; the
# task API used here (`ray.remote(max_retries=...)`, `RayTaskError.cause`) is
# older. Tested: the pin in requirements.txt.
MIN_RAY_VERSION = (2, 5)
_CONNECT_TIMEOUT_SECONDS = 5.0


def _tcp_endpoint(address: str) -> tuple[str, int] | None:
  """(host, port) of a --ray_address to probe by TCP, or None.

  'auto' (the cluster this machine belongs to, found by Ray) has no
  endpoint to probe; 'host:port' and 'ray://host:port' (Ray Client) have.

  Raises:
    train_config.ConfigError: the address is neither.
  """
  if address == 'auto':
    return None
  text = address.removeprefix('ray://')
  host, sep, port = text.rpartition(':')
  host = host.strip('[]')
  if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise train_config.ConfigError(
        f"--ray_address must be 'auto', HOST:PORT or ray://HOST:PORT; got "
        f'{address!r}.')
  return host, int(port)


def _import_ray() -> Any:
  """The `ray` module, if installed at a version with the needed API."""
  try:
    import ray  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    raise train_config.ConfigError(
        "--executor=ray needs Ray (pip install '.[ray]'; the tested pin is "
        f'in requirements.txt): {error}.') from None
  version = getattr(ray, '__version__', '0')
  try:
    numbers = tuple(int(part) for part in version.split('.')[:2])
  except ValueError:
    numbers = (0,)
  if numbers < MIN_RAY_VERSION or not all(
      hasattr(ray, name) for name in ('init', 'remote', 'get', 'shutdown')):
    raise train_config.ConfigError(
        f'--executor=ray needs Ray >= '
        f'{".".join(map(str, MIN_RAY_VERSION))}; got {version}.')
  return ray


class RayExecutor:
  """Maps a run's task over configs as Ray tasks; see the module docstring.

  A `grid.Executor`: `executor(task, programs)` returns the tasks' results
  in the order of `programs`.
  """

  def __init__(self, ray: Any, max_retries: int = DEFAULT_MAX_RETRIES):
    self._ray = ray
    self._max_retries = max_retries

  def __call__(self, task: Callable[[Sequence[train_config.TrainConfig]], T],
               programs: Sequence[Sequence[train_config.TrainConfig]]
               ) -> list[T]:
    """Runs `task(program)` for every program as a Ray task; waits for all.

    Raises:
      Exception: the first failed task's own exception (not retried).
      ray.exceptions.RayError: a task whose worker died more than
        `max_retries` times, or a lost cluster.
      interrupts.Interrupted: Ctrl-C or SIGTERM; the unfinished tasks were
        cancelled and have saved their runs (see the module docstring).
    """
    remote = self._ray.remote(max_retries=self._max_retries)(task)
    # Ray hides every GPU from a task that asks for none.
    pending = [
        remote.options(num_gpus=int(program[0].accelerator == 'gpu')).remote(
            program) for program in programs]
    try:
      return self._ray.get(pending)
    except self._ray.exceptions.RayTaskError as error:
      if isinstance(error.cause, Exception):
        raise error.cause from None
      raise
    except KeyboardInterrupt:
      unfinished = self._stop(pending)
      raise interrupts.Interrupted(_stopped_line(
          [config for i in unfinished for config in programs[i]])) from None

  def _stop(self, pending: Sequence[Any]) -> list[int]:
    """Cancels the unfinished tasks and waits for them; their indices."""
    done, _ = self._ray.wait(list(pending), num_returns=len(pending),
                             timeout=0)
    unfinished = [i for i, ref in enumerate(pending) if ref not in done]
    for i in unfinished:
      self._ray.cancel(pending[i])
    if unfinished:
      try:
        self._ray.wait([pending[i] for i in unfinished],
                       num_returns=len(unfinished),
                       timeout=_STOP_TIMEOUT_SECONDS)
      except KeyboardInterrupt:
        pass  # A second interrupt: stop waiting.
    return unfinished


def _stopped_line(configs: Sequence[train_config.TrainConfig]) -> str:
  """The line of an interrupted grid: each unfinished run's saved round.

  Runs with a report (finished before) are left out.
  """
  saved = [(config.run_dir, train.saved_round(config)) for config in configs
           if not os.path.exists(os.path.join(
               config.run_dir, run_directory.REPORT_JSON_FILE))]
  started = [(run_dir, done) for run_dir, done in saved if done is not None]
  if not started:
    return ('interrupted before the unfinished runs began; rerun the same '
            'command to run them')
  return ('interrupted after ' + ', '.join(
      f'round {done} ({run_dir})' for run_dir, done in started) +
          '; rerun the same command to resume each from its round')


def connect(address: str | None, num_cpus: int | None = None,
            max_retries: int = DEFAULT_MAX_RETRIES,
            temp_dir: str | None = None) -> RayExecutor:
  """A `RayExecutor` on the cluster at `address`, or a new local one.

  Args:
    address: --ray_address: 'auto', 'HOST:PORT' or 'ray://HOST:PORT' of a
      running cluster; None starts a local cluster of this machine's CPUs.
    num_cpus: CPUs of a new local cluster (None: all of them); one run per
      CPU at a time.
    max_retries: retries of a task whose worker died.
    temp_dir: where a new local cluster keeps its session (logs, sockets);
      None: Ray's default, `ray` in the temporary directory. Its Unix
      sockets' paths must stay within 107 bytes.

  Returns:
    The executor, connected.

  Raises:
    train_config.ConfigError: Ray is missing or too old, or `address` is
      malformed, unreachable or refuses the connection (naming the flag).
  """
  ray = _import_ray()
  if address is not None:
    endpoint = _tcp_endpoint(address)
    if endpoint is not None:
      try:
        socket.create_connection(endpoint,
                                 timeout=_CONNECT_TIMEOUT_SECONDS).close()
      except OSError as error:
        raise train_config.ConfigError(
            f'--ray_address {address!r} is unreachable: {error}.') from None
  try:
    if address is None:
      ray.init(num_cpus=num_cpus, include_dashboard=False,
               log_to_driver=True, _temp_dir=temp_dir)
    else:
      ray.init(address=address, log_to_driver=True)
  except (ConnectionError, RuntimeError, ValueError) as error:
    cause = str(error.args[0]) if error.args else repr(error)
    raise train_config.ConfigError(
        f'--ray_address {address!r}: cannot connect to Ray: '
        f'{cause.splitlines()[0].rstrip(".")}.') from None
  return RayExecutor(ray, max_retries)

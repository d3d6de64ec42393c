"""The device check rehearsed on a CPU, in the accelerator image's packages.

`make device-check-cpu` runs this with a Python 3.12 interpreter. It

1. builds (or reuses, if its requirements are unchanged) a virtual
   environment holding exactly the packages of the accelerator machines'
   image that the check relies on (requirements-device-image.txt: jax,
   jaxlib, flax, optax, chex, absl-py, numpy, scipy, matplotlib, tqdm,
   pytest and what pip resolves for them; no TensorFlow, no dp-accounting,
   no jax-privacy), from the package index;
2. runs `scripts/device_check.py --tiny --accelerator=cpu` with that
   environment's interpreter and JAX_PLATFORMS=cpu: it installs the carried
   wheels (`make device-wheels`) offline, as on the device, and runs every
   step at toy sizes;
3. fails (exit 1) unless every step passed and some carried wheel was
   installed (missing from the image's packages).

A package the JAX path imports that neither the image nor the wheels
provide, or a TensorFlow import on the JAX path, fails a step here, before
a machine is lent.

  python3.12 scripts/device_env.py --venv=DIR --out=DIR [--wheels=DIR]
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import venv
from collections.abc import Sequence

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
IMAGE_REQUIREMENTS = os.path.join(REPO, 'requirements-device-image.txt')
_STAMP = '.device-image'
# The toy steps on a CPU (2m20s of CPU time on a 2-core KVM guest) get 4x
# the GPU's caps and 30 minutes: a rehearsal of imports and plumbing, not of
# speed, it must not fail on a busy machine.
_CAP_SCALE = 4
_BUDGET_S = 1800


def _digest(path: str) -> str:
  with open(path, 'rb') as stream:
    return hashlib.sha256(stream.read()).hexdigest()


def build(directory: str) -> str:
  """The image's virtual environment in `directory`; its python.

  Rebuilt from scratch unless its stamp names the current requirements.

  Args:
    directory: where the environment lives.

  Returns:
    The environment's interpreter.

  Raises:
    subprocess.CalledProcessError: pip failed.
  """
  python = os.path.join(directory, 'bin', 'python')
  stamp = os.path.join(directory, _STAMP)
  digest = _digest(IMAGE_REQUIREMENTS)
  if os.path.exists(stamp):
    with open(stamp, encoding='utf-8') as stream:
      if stream.read() == digest and os.path.exists(python):
        return python
  venv.EnvBuilder(clear=True, with_pip=True).create(directory)
  subprocess.run([python, '-m', 'pip', 'install', '--quiet',
                  '--disable-pip-version-check', '-r', IMAGE_REQUIREMENTS],
                 check=True)
  with open(stamp, 'w', encoding='utf-8') as stream:
    stream.write(digest)
  return python


def main(argv: Sequence[str]) -> int:
  """Builds the environment, runs the tiny check in it; 0 if it passed."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--venv', required=True,
                      help='The image environment (kept between runs).')
  parser.add_argument('--out', required=True, help='The check\'s results.')
  parser.add_argument('--wheels', default=os.path.join(REPO, 'device_wheels'))
  args = parser.parse_args(argv)
  if sys.version_info[:2] != (3, 12):
    parser.error('run this with Python 3.12 (the accelerator image\'s); got '
                 f'{sys.version.split()[0]}.')
  if not os.path.isdir(args.wheels):
    parser.error(f'--wheels {args.wheels!r} is not a folder: run '
                 '`make device-wheels` first.')
  python = build(args.venv)
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env.pop('PYTHONPATH', None)
  completed = subprocess.run(
      [python, os.path.join(REPO, 'scripts', 'device_check.py'), '--tiny',
       '--accelerator=cpu', f'--out={args.out}', f'--wheels={args.wheels}',
       f'--cap_scale={_CAP_SCALE}', f'--budget_s={_BUDGET_S}'],
      cwd=REPO, env=env, check=False)
  with open(os.path.join(args.out, 'device_check.json'),
            encoding='utf-8') as stream:
    figures = json.load(stream)
  if not figures['wheels']['installed']:
    print('no carried wheel was installed: the image environment already has '
          'them all, so the check proved nothing about them.', file=sys.stderr)
    return 1
  if figures['wheels']['present']:
    print('note: carried wheels this environment already has (skipped): '
          f'{figures["wheels"]["present"]}', file=sys.stderr)
  return completed.returncode


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))

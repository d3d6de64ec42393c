"""Every Python code block of README.md and docs/ runs as written.

Each ```python block is executed by a fresh interpreter (this one's) in an
empty temporary directory, not the repository root, so a block that claims
to run "from any directory" must: the project is found on PYTHONPATH (this
tree), nothing else of the repository is. A block must exit with status 0.

A block that cannot run here (it needs data, a GPU or hours) is marked on
the line just before its opening fence with an HTML comment that Markdown
does not show, naming why:

    <!-- docs_code_test: skip (needs the real EMNIST files) -->

A skip without a reason fails. Blocks run on the tiny settings they are
written with; the README's TFF block trains a few rounds (about a minute),
hence this file's Bazel tag "tff" (`bazel test --config=tff`).
"""

import glob
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# A fenced block, with the line before it (where a skip mark may stand).
_BLOCK = re.compile(r'(?:^(?P<before>[^\n]*)\n)?^```(?P<language>\w*)\n'
                    r'(?P<code>.*?)^```', re.S | re.M)
_SKIP = re.compile(r'<!--\s*docs_code_test:\s*skip\b\s*(?P<reason>.*?)\s*-->')


def documents() -> list[str]:
  """README.md and every Markdown page under docs/, repository-relative."""
  pages = glob.glob(os.path.join(REPO, 'docs', '**', '*.md'), recursive=True)
  return ['README.md'] + sorted(os.path.relpath(p, REPO) for p in pages)


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
  """(line number, code, skip reason or None) of each Python block of `text`.

  Args:
    text: A Markdown document.

  Returns:
    One entry per ```python block, in order; the reason is '' for a skip
    mark without one.
  """
  blocks = []
  for match in _BLOCK.finditer(text):
    if match.group('language') != 'python':
      continue
    line = text.count('\n', 0, match.start('code'))
    skip = _SKIP.search(match.group('before') or '')
    reason = None if skip is None else skip.group('reason').strip('() ')
    blocks.append((line, match.group('code'), reason))
  return blocks


def _cases() -> list:
  cases = []
  for path in documents():
    with open(os.path.join(REPO, path), encoding='utf-8') as stream:
      for line, code, reason in python_blocks(stream.read()):
        cases.append(pytest.param(path, code, reason, id=f'{path}:{line}'))
  return cases


@pytest.mark.slow
@pytest.mark.parametrize('path, code, reason', _cases())
def test_python_block_runs_as_written(path, code, reason, tmp_path):
  if reason is not None:
    assert reason, f'{path}: a skipped block must say why'
    pytest.skip(reason)
  env = dict(os.environ, PYTHONPATH=REPO)
  env.pop('TF_CPP_MIN_LOG_LEVEL', None)  # As the reader's shell has it.
  completed = subprocess.run([sys.executable, '-c', code], cwd=tmp_path,
                             env=env, capture_output=True, text=True,
                             timeout=900, check=False)
  assert completed.returncode == 0, (
      f'{path}: the block exits {completed.returncode}:\n'
      f'{completed.stderr[-3000:]}')
  # A block shows the project used as it advises: without its own warnings
  # (e.g. canaries too large a share of each round's participants).
  assert 'UserWarning' not in completed.stderr, (
      f'{path}: the block warns:\n{completed.stderr[-3000:]}')


def test_the_documents_have_python_blocks():
  # The README's two uses of the library: the TFF plug-in and the estimates.
  found = {path: len(python_blocks(open(os.path.join(REPO, path),
                                        encoding='utf-8').read()))
           for path in documents()}
  assert found['README.md'] >= 1 and found['docs/api.md'] >= 1


_MARKED = '''Text.

<!-- docs_code_test: skip (needs the real EMNIST files) -->
```python
open('/data/emnist_all.sqlite')
```

```python
print(1)
```

<!-- docs_code_test: skip -->
```python
x
```

```sh
python -c 'print(2)'
```
'''


def test_blocks_and_skip_marks_are_read():
  assert python_blocks(_MARKED) == [
      (4, "open('/data/emnist_all.sqlite')\n", 'needs the real EMNIST files'),
      (8, 'print(1)\n', None),
      (13, 'x\n', '')]


def test_a_failing_block_fails(tmp_path):
  completed = subprocess.run(
      [sys.executable, '-c', python_blocks(_MARKED)[2][1]], cwd=tmp_path,
      capture_output=True, text=True, timeout=60, check=False)
  assert completed.returncode != 0 and 'NameError' in completed.stderr


@pytest.mark.slow
def test_the_example_runs_by_path_from_another_directory(tmp_path):
  # README: `examples` is not installed; from outside the repository root
  # the example runs by its path.
  env = dict(os.environ, PYTHONPATH=REPO)
  completed = subprocess.run(
      [sys.executable, os.path.join(REPO, 'examples', 'canaries_in_fedavg.py')],
      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
      check=False)
  assert completed.returncode == 0, completed.stderr[-3000:]
  assert '| final model |' in completed.stdout

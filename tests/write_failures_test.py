"""Tests that failed writes become one line naming the file and the cause.

Truths: the errors the system and TensorFlow really raise (writes to
/dev/full, which fails every write with ENOSPC), `os.strerror`, and the
message TensorFlow's SaveV2 gives on a full tmpfs (recorded verbatim).
"""

import errno
import os
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

from one_shot_epe.runtime import write_failures

_NO_SPACE = os.strerror(errno.ENOSPC)

# tf.saved_model.save of a checkpoint version on a full tmpfs (TF 2.14).
_SAVE_V2_MESSAGE = (
    '{{function_node __wrapped__SaveV2_dtypes_2_device_/job:localhost/'
    'replica:0/task:0/device:CPU:0}} /out/run/checkpoints/program_state_4_'
    'temp2941/variables/variables_temp/part-00000-of-00001.data-00000-of-'
    '00001.tempstate3641062018696947681; No space left on device [Op:SaveV2]')


def _resource_exhausted(message):
  return tf.errors.ResourceExhaustedError(None, None, message)


def test_real_errors_of_python_and_tensorflow():
  with pytest.raises(write_failures.WriteFailure) as python_failure:
    with write_failures.reported('/dev'):
      with open('/dev/full/report.json', 'w', encoding='utf-8'):
        pass
  assert python_failure.value.path == '/dev/full/report.json'
  assert python_failure.value.cause == os.strerror(errno.ENOTDIR)
  with pytest.raises(write_failures.WriteFailure) as tf_failure:
    with write_failures.reported('/dev'):
      with tf.io.gfile.GFile('/dev/full', 'w') as stream:
        stream.write('x' * 100_000)
  assert (tf_failure.value.path, tf_failure.value.cause) == ('/dev/full',
                                                             _NO_SPACE)
  # Python's error of a failed write(2) names no file: it is not taken for
  # a failed write of the directory (atomic_io names its target instead).
  with pytest.raises(OSError) as unnamed:
    with write_failures.reported('/dev'):
      with open('/dev/full', 'wb') as stream:
        stream.write(b'x')
        stream.flush()
  assert unnamed.value.errno == errno.ENOSPC
  assert not isinstance(unnamed.value, write_failures.WriteFailure)


def test_an_unnamed_os_error_passes_through():
  error = OSError(errno.ENOSPC, _NO_SPACE)
  assert write_failures.from_error(error, '/out') is None
  with pytest.raises(OSError) as raised:
    with write_failures.reported('/out'):
      raise error
  assert raised.value is error


def test_os_errors_inside_the_directory_name_the_final_file():
  cases = {
      '/out/run/report.json': '/out/run/report.json',
      '/out/run/metrics.csv_temp1234': '/out/run/metrics.csv',
      '/out/run': '/out/run',
      '/out': '/out',
  }
  for filename, named in cases.items():
    failure = write_failures.from_error(
        OSError(errno.ENOSPC, _NO_SPACE, filename), '/out')
    assert (failure.path, failure.cause) == (named, _NO_SPACE), filename
  failure = write_failures.from_error(
      OSError(errno.EROFS, os.strerror(errno.EROFS), '/elsewhere',
              None, '/out/run/x'), '/out')
  assert failure.path == '/out/run/x'
  assert write_failures.from_error(
      PermissionError(errno.EACCES, 'denied', '/outside/run'), '/out') is None
  assert write_failures.from_error(
      OSError(errno.EIO, 'I/O error', '/out2/run'), '/out') is None


def test_tensorflow_errors_name_the_checkpoint_version_or_file():
  failure = write_failures.from_error(_resource_exhausted(_SAVE_V2_MESSAGE),
                                      '/out')
  assert failure.path == '/out/run/checkpoints/program_state_4'
  assert failure.cause == _NO_SPACE
  failure = write_failures.from_error(
      _resource_exhausted('/out/run/metrics.csv_temp5555; ' + _NO_SPACE),
      '/out/run')
  assert failure.path == '/out/run/metrics.csv'
  relative = write_failures.from_error(
      _resource_exhausted(f'{os.getcwd()}/out/run/report.json; Disk quota '
                          'exceeded'), 'out')
  assert os.path.abspath(relative.path) == os.path.abspath(
      'out/run/report.json')
  assert relative.cause == os.strerror(errno.EDQUOT)
  assert write_failures.from_error(
      _resource_exhausted('/elsewhere/out/run/x; ' + _NO_SPACE), 'out') is None


def test_other_tensorflow_errors_pass_through():
  out_of_memory = _resource_exhausted(
      'OOM when allocating tensor with shape[1000000000] and type float on '
      '/job:localhost/replica:0/task:0/device:CPU:0')
  sibling = _resource_exhausted('/out2/run/x; ' + _NO_SPACE)
  for error in (out_of_memory, sibling):
    assert write_failures.from_error(error, '/out') is None
    with pytest.raises(tf.errors.ResourceExhaustedError) as raised:
      with write_failures.reported('/out'):
        raise error
    assert raised.value is error
  with pytest.raises(ValueError, match='a bug'):
    with write_failures.reported('/out'):
      raise ValueError('a bug')


def test_message_is_one_line_naming_file_cause_and_what_next():
  with pytest.raises(write_failures.WriteFailure) as raised:
    with write_failures.reported('/out'):
      raise OSError(errno.ENOSPC, _NO_SPACE, '/out/run/report.md')
  message = str(raised.value)
  assert '\n' not in message
  assert "'/out/run/report.md'" in message and _NO_SPACE in message
  assert 'intact' in message and 'rerun the same command' in message


def test_argument_checks():
  with pytest.raises(TypeError, match='directory must be a str'):
    with write_failures.reported(b'/out'):
      pass
  with pytest.raises(ValueError, match='non-empty'):
    with write_failures.reported(''):
      pass


def test_works_where_tensorflow_cannot_be_imported():
  # The JAX engine's programs run without TensorFlow: a real failed write
  # is still reported, and TensorFlow is never imported.
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  script = textwrap.dedent("""
      import sys
      sys.modules['tensorflow'] = None
      from one_shot_epe.runtime import write_failures
      try:
        with write_failures.reported('/dev'):
          open('/dev/full/report.json', 'w')
      except write_failures.WriteFailure as failure:
        print('FAILURE', failure.path, '|', failure.cause)
      try:
        with write_failures.reported('/dev'):
          raise KeyError('not a write')
      except KeyError:
        print('PASSED THROUGH')
  """)
  done = subprocess.run([sys.executable, '-c', script], cwd=repo,
                        capture_output=True, text=True, timeout=60,
                        check=False)
  assert done.returncode == 0, done.stderr
  assert ('FAILURE /dev/full/report.json | '
          f'{os.strerror(errno.ENOTDIR)}') in done.stdout
  assert 'PASSED THROUGH' in done.stdout

"""`pytest_test`: a Bazel py_test that runs one pytest file of tests/."""

def pytest_test(name, src, deps = [], data = [], tags = [], size = "medium", **kwargs):
    """A py_test running the pytest file `src` through tests/pytest_runner.py.

    Args:
      name: target name; by convention the file name without ".py".
      src: the test file, e.g. "estimation_test.py".
      deps: the project targets `src` imports (tests/build_files_test.py checks
        that they match the imports exactly).
      data: files the test reads at run time (configs, ...).
      tags: e.g. "tff" for tests that run the TFF runtime (skipped by
        `bazel test //...` unless --config=tff, see .bazelrc).
      size: Bazel test size (timeout class).
      **kwargs: passed to py_test.
    """
    native.py_test(
        name = name,
        srcs = ["pytest_runner.py", src],
        main = "pytest_runner.py",
        args = ["$(location %s)" % src],
        deps = deps + [":conftest"],
        data = data + ["//:pytest.ini"],
        tags = tags,
        size = size,
        **kwargs
    )

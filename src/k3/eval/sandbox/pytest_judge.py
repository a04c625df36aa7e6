"""A pytest suite run in the sandbox's judge process (judge.py), against the code under test in the worker.

The suite (the repository's own tests as the challenge shipped them, plus the hidden ones) lies in a
directory only the judge may read. pytest runs here, with its plugins off and its configuration ours;
every module of the repository under test is a proxy to the worker, so no line the agent wrote runs in
this process. Each test's outcome is taken from pytest's reports by a plugin object that lives here,
and goes out as the verdict: the worker cannot reach the plugin, the reports, the exit code or the
verdict's fd. Standard library and pytest only (loaded by path inside the sandbox)."""

import os
import sys


class Outcomes:
    """pytest's reports -> {test id: passed | failed | skipped | error}, a test's worst report kept (a passing
    call with a failing teardown failed)."""

    def __init__(self):
        self.found = {}

    def _put(self, nodeid, outcome):
        if self.found.get(nodeid, "passed") == "passed":
            self.found[nodeid] = outcome

    def pytest_collectreport(self, report):
        if not report.passed:
            self._put(report.nodeid, "error" if report.failed else "skipped")

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self._put(report.nodeid, "passed" if report.passed else "skipped" if report.skipped else "failed")


def run(spec, link, root, finder):
    """spec: {"dir": the suite's directory, "modules": the repository's top-level names} -> {"outcomes",
    "exit", "error"}. `finder` (judge.WorkspaceFinder) is installed before pytest imports anything."""
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"     # only pytest itself: no plugin of the environment's
    sys.dont_write_bytecode = True                        # nothing of the suite's is written anywhere
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != root]
    finder.install()
    tests = os.path.join(spec["dir"], "tests")
    outcomes = Outcomes()
    try:
        import pytest

        code = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:stepwise", "--capture=sys",
                            "--continue-on-collection-errors", "-c",
                            os.path.join(spec["dir"], "pytest.ini"), "--rootdir", tests, "--confcutdir", tests,
                            "--import-mode=prepend", "-o", "console_output_style=classic", tests], plugins=[outcomes])
        error = None
    except BaseException as e:   # pytest itself failing is the judge's error, reported as one
        code, error = None, f"{type(e).__name__}: {e}"[:500]
    return {"outcomes": outcomes.found, "exit": int(code) if code is not None else None, "error": error,
            "worker": link.gone}

"""ctest's entry to the Python tests: runs pytest with the interpreter that ctest names
(/usr/bin/python3), on the arguments given (files, --ignore=...) or else on this whole folder.
Without pytest (python3-pytest) it exits 77, which ctest reports as skipped; pytest's "no tests
collected" (5) is a failure, not a pass.
"""

import os
import sys

try:
    import pytest
except ImportError:
    print("pytest is not installed (apt-get install python3-pytest): the Python tests are skipped")
    sys.exit(77)

args = sys.argv[1:] or [os.path.dirname(os.path.abspath(__file__))]
rc = pytest.main(["-q", "-p", "no:cacheprovider", *args])
if rc == 5:
    print("pytest collected no tests: that is a failure")
    sys.exit(1)
sys.exit(int(rc))

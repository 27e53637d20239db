"""Puts a build's Python package on this interpreter's path: writes pejit.pth into the first
site-packages directory of site.getsitepackages() that can be written, naming the folder that
holds the built package (build/python). Run by the build (python/CMakeLists.txt) with
/usr/bin/python3; where no directory can be written it says so and how to use PYTHONPATH.
Usage: python3 write_pth.py BUILD_PYTHON_DIR
"""

import os
import site
import sys


def main():
    target = os.path.abspath(sys.argv[1])
    line = target + "\n"
    for d in site.getsitepackages():
        path = os.path.join(d, "pejit.pth")
        try:
            if os.path.exists(path) and open(path).read() == line:
                return 0
            os.makedirs(d, exist_ok=True)
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                f.write(line)
            os.replace(tmp, path)
            print(f"pejit: {path} -> {target} (import pejit works in {sys.executable})")
            return 0
        except OSError:
            continue
    print(
        f"pejit: no writable site-packages for {sys.executable}; "
        f"use PYTHONPATH={target} to import pejit"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

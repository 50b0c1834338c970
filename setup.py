# SPDX-License-Identifier: MIT
"""Bundles the C client library into the Python package (pyproject.toml).

The package is pure Python over libpreduce (ctypes); the install copies
build/libpreduce.so.1 into preduce/_lib/, running `make` for it when the
tree has not been built, so an environment needs no PREDUCE_LIB and no
system install. PREDUCE_NO_BUNDLE=1 leaves it out (a distribution's
package, which depends on its libpreduce1).
"""

import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join("build", "libpreduce.so.1")


def bundling():
    """False when PREDUCE_NO_BUNDLE asks for the system's library."""
    return os.environ.get("PREDUCE_NO_BUNDLE", "") in ("", "0")


class BuildPy(build_py):
    """build_py, then the library beside the modules."""

    def run(self):
        super().run()
        if not bundling():
            return
        lib = os.path.join(ROOT, LIB)
        if not os.path.exists(lib):
            subprocess.run(["make", "-C", ROOT, LIB], check=True)
        dest = os.path.join(self.build_lib, "preduce", "_lib")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(lib, os.path.join(dest, "libpreduce.so.1"))


class BinaryDistribution(Distribution):
    """A wheel with the library in it is for this platform only."""

    def has_ext_modules(self):
        return bundling()


setup(cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution)

"""`pip install .`: the qkv Python package (python/qkv/) with its engine (the pybind11 extension qkv._qkv)
built by this project's CMake, not by setuptools' compiler: setuptools only runs CMake and copies the result.

    python3 -m venv --system-site-packages VENV          # Debian's numpy (and pybind11-dev to build)
    VENV/bin/pip install --no-build-isolation --no-index .

The CMake build directory is $QKV_BUILD_DIR when set (an existing build is reused: only the qkv_python target
is brought up to date), else build-pip/ in the source tree. $QKV_BUILD_JOBS sets the parallel jobs (default
the machine's cores). The module is built for the Python running pip (Python_EXECUTABLE). Nothing is
downloaded: a missing pybind11-dev or python3-dev is a CMake error naming it.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


def version():
    """The project's version, from CMakeLists.txt's project(qkv VERSION …)."""
    m = re.search(r"project\(qkv VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    return m.group(1)


class CMakeBuild(build_ext):
    """Builds qkv._qkv with CMake and puts the module where setuptools expects the extension."""

    def build_extension(self, ext):
        build = pathlib.Path(os.environ.get("QKV_BUILD_DIR") or ROOT / "build-pip").resolve()
        jobs = os.environ.get("QKV_BUILD_JOBS") or str(os.cpu_count() or 1)
        if not (build / "CMakeCache.txt").exists():
            subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                            "-DQKV_BUILD_TESTS=OFF", "-DQKV_BUILD_BENCH=OFF", "-DQKV_PYTHON=ON",
                            "-DPython_EXECUTABLE=" + sys.executable], check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "qkv_python", "-j", jobs], check=True)
        built = sorted((build / "python" / "qkv").glob("_qkv*.so"))
        if not built:
            sys.exit("qkv: CMake built no python/qkv/_qkv*.so in %s (pybind11-dev and python3-dev installed?)" % build)
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[-1], target)


setup(
    name="qkv",
    version=version(),
    description="Attention, read off the weights: a C++ engine for transformer interpretability, from Python",
    packages=["qkv"],
    package_dir={"qkv": "python/qkv"},
    ext_modules=[Extension("qkv._qkv", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["numpy"],
    options={"build": {"build_base": "build-pip/setuptools"}, "egg_info": {"egg_base": "build-pip"}},
    zip_safe=False,
)

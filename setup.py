"""Builds the bertlab Python module with this CMake tree (pybind11's cmake_example pattern).

pip install --no-build-isolation .      # Debian's pip and setuptools; a venv or the user's site

The CMake build directory is build-python/ (kept between installs, so a rebuild is incremental),
or BERTLAB_BUILD_DIR (an existing build, e.g. build/, is reused as it is configured);
BERTLAB_CMAKE_ARGS adds configure options, BERTLAB_BUILD_JOBS sets the parallel jobs. A fresh
tree builds the module for the Python that runs pip.
"""
import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        build = Path(os.environ.get("BERTLAB_BUILD_DIR", ROOT / "build-python")).resolve()
        fresh = not (build / "CMakeCache.txt").exists()
        build.mkdir(exist_ok=True)
        configure = ["cmake", "-S", str(ROOT), "-B", str(build), "-DBERTLAB_PYTHON=ON"]
        if fresh:  # a tree of its own: Release, no tests; an existing one keeps its settings
            configure += ["-DCMAKE_BUILD_TYPE=Release", "-DBERTLAB_BUILD_TESTS=OFF", f"-DPython3_EXECUTABLE={sys.executable}"]
        configure += shlex.split(os.environ.get("BERTLAB_CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        jobs = os.environ.get("BERTLAB_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", str(build), "--target", "_bertlab", "-j", jobs], check=True)
        built = next((build / "python" / "bertlab").glob("_bertlab*.so"), None)
        if built is None:
            sys.exit("setup.py: CMake did not build the module (does it find python3-dev and pybind11-dev?)")
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built), str(target))


setup(
    name="bertlab",
    version="0.1.0",
    description="Run, train, profile and model BERT on CPUs and accelerators",
    python_requires=">=3.9",
    packages=["bertlab"],
    package_dir={"bertlab": "apps/python/bertlab"},
    package_data={"bertlab": ["py.typed"]},
    install_requires=["numpy"],
    ext_modules=[CMakeExtension("bertlab._bertlab")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)

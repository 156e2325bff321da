"""Bundles libattn.so into the package when built from the source tree.

The library is taken from $ATTN_LIBRARY when set, else from ../build/libattn.so (what `make`
builds); without either the package installs without it and finds the library at run time
($ATTN_LIBRARY or the system's loader path)."""
import os
import shutil

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _library():
    for p in (os.environ.get("ATTN_LIBRARY"), os.path.join(HERE, "..", "build", "libattn.so")):
        if p and os.path.exists(p):
            return os.path.realpath(p)
    return None


class BuildPy(build_py):
    def run(self):
        super().run()
        lib = _library()
        if lib:
            dst = os.path.join(self.build_lib, "attn", "libattn.so")
            self.announce(f"attn: bundling {lib}", level=2)
            shutil.copyfile(lib, dst)
        else:
            self.announce("attn: libattn.so not found (run `make` first, or set ATTN_LIBRARY); "
                          "the package will look for it at run time", level=3)


class Dist(Distribution):
    """A platform wheel when libattn.so is bundled (it is a native library)."""

    def has_ext_modules(self):
        return _library() is not None


setup(cmdclass={"build_py": BuildPy}, distclass=Dist)

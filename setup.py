"""Cython extensions; everything else lives in pyproject.toml."""
from Cython.Build import cythonize
from setuptools import Extension, setup

COMPILE_ARGS = ["-O3", "-march=x86-64-v2", "-fno-strict-aliasing"]
DIRECTIVES = {
    "language_level": "3",
    "boundscheck": False,
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": False,
}

# One entry per compiled module; keep this list in sync with the .pyx files.
MODULES = [
    "tengen.go.board",
    "tengen.go.playout",
    "tengen.go.passalive",
    "tengen.go.ladder",
    "tengen.go.features",
    "tengen.search.score_utility",
    "tengen.search.nn_cache",
    "tengen.search.symmetry",
    "tengen.search.leaf_planes",
    "tengen.search.root_noise",
    "tengen.search.ending_bonus",
    "tengen.search.subtree_bias",
    "tengen.search.playouts",
    "tengen.search.mcts",
]


def extension(name: str) -> Extension:
    return Extension(name, [name.replace(".", "/") + ".pyx"], extra_compile_args=COMPILE_ARGS)


setup(ext_modules=cythonize([extension(m) for m in MODULES], compiler_directives=DIRECTIVES))

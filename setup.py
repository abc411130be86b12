"""The compiled parts: a dense grid model's lattice tiles in one pass (service/engine/_latticekernel.c), and its
entropy-coded tables decoded in one pass (modelrepo/_tablecode.c, modelrepo/_ctxcode.c).

Everything else is in pyproject.toml. The extensions are optional: where they cannot be built (no C compiler), the
service renders lattice tiles with numpy and onnxruntime instead (service/engine/lattice.py), and numpy decodes the
tables (modelrepo/tablecode.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "service.engine._latticekernel",
            ["service/engine/_latticekernel.c"],
            extra_compile_args=["-O3", "-Wno-psabi"],
            optional=True,
        ),
        Extension("modelrepo._tablecode", ["modelrepo/_tablecode.c"], extra_compile_args=["-O3"], optional=True),
        Extension("modelrepo._ctxcode", ["modelrepo/_ctxcode.c"], extra_compile_args=["-O3"], optional=True),
    ]
)

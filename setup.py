"""The one compiled part: a dense grid model's lattice tiles in one pass (service/engine/_latticekernel.c).

Everything else is in pyproject.toml. The extension is optional: where it cannot be built (no C compiler), the
service renders lattice tiles with numpy and onnxruntime instead (service/engine/lattice.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "service.engine._latticekernel",
            ["service/engine/_latticekernel.c"],
            extra_compile_args=["-O3", "-Wno-psabi"],
            optional=True,
        )
    ]
)

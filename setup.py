"""The package's one compiled module (everything else is in pyproject.toml): the index of idempotency keys in C."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "hermes.frontend.key_index",
            ["src/hermes/frontend/key_index.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror"],
        )
    ]
)

"""The package's one compiled module (everything else is in pyproject.toml): the idempotency keys' table in C."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "hermes.frontend.key_table",
            ["src/hermes/frontend/key_table.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror"],
        )
    ]
)

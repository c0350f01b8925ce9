# The two set-up commands of the README: `make run` and `make test`. Both install what they need first.
.PHONY: setup run test lint typecheck check bench

setup:
	@./scripts/setup.sh

run: setup
	.venv/bin/hermes run

test: setup
	.venv/bin/ruff check src tests
	.venv/bin/mypy
	.venv/bin/python -m pytest

lint: setup
	.venv/bin/ruff check src tests
	.venv/bin/ruff format --check src tests

typecheck: setup
	.venv/bin/mypy

# The benchmark suite (about 21 minutes, 10 of them a sustained run; `hermes bench --quick` about 4): bench-results/
# and docs/benchmarks.md.
bench: setup
	.venv/bin/hermes bench --docs docs/benchmarks.md

# The two set-up commands of the README: `make run` and `make test`. Both install what they need first: `make run`
# only what running uses, `make test` the test and benchmark tools too.
.PHONY: setup setup-run run test lint typecheck check bench

# What `hermes run` uses: the ZooKeeper client (--metadata-store zookeeper), the Spark pipeline, uvloop, the STOMP
# client of jms:// endpoints.
RUN_EXTRAS = zookeeper,spark,fast,jms

setup:
	@./scripts/setup.sh

setup-run:
	@HERMES_EXTRAS=$(RUN_EXTRAS) ./scripts/setup.sh

run: setup-run
	.venv/bin/hermes run

# The suite in two pytest-xdist workers (tests/conftest.py: whole modules each, the Spark tier in one).
test: setup
	.venv/bin/ruff check src tests
	.venv/bin/mypy
	.venv/bin/python -m pytest -n 2 --dist loadscope

lint: setup
	.venv/bin/ruff check src tests
	.venv/bin/ruff format --check src tests

typecheck: setup
	.venv/bin/mypy

# The benchmark suite (about 35 minutes, 10 of them a sustained run; `hermes bench --quick` about 4): bench-results/
# and docs/benchmarks.md.
bench: setup
	.venv/bin/hermes bench --docs docs/benchmarks.md

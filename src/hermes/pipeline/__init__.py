"""The data pipeline: PySpark jobs beside the broker (offline storage of topics in a Parquet lake, and the
jobs part 2 registers in :mod:`hermes.pipeline.runner`). Needs the ``spark`` extra."""

"""The archive benchmark's split of the Spark JVM's CPU by kind of thread (hermes.bench.archive)."""

from hermes.bench.archive import _by_thread


def test_the_serial_collectors_vm_thread_counts_as_garbage_collection() -> None:
    before = {"VM Thread": 1.0, "Executor task launch worker for task N": 2.0}
    after = {
        "VM Thread": 4.0,  # the serial collector's pauses
        "GC Thread#N": 0.5,  # the parallel workers of G1
        "GN Conc#N": 0.25,
        "Executor task launch worker for task N": 7.0,
        "CN CompilerThreN": 1.0,
    }

    split = _by_thread(before, after, total=12.0)

    assert split == {"tasks": 5.0, "jit": 1.0, "gc": 3.75, "other": 2.25}

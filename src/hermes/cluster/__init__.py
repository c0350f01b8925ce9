"""Distributed mode (docs/cluster.md): with the ZooKeeper metadata store, consumer nodes and frontends register in
ZooKeeper, an elected coordinator assigns subscriptions to consumer nodes by load, and nodes take over from each
other. Only assignment.py is free of kazoo; the rest is imported when the store is ZooKeeper."""

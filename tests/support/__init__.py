"""This repository's own test support (not shipped): the daemons under test run from the
checkout, exact-byte clients, clusters, etcd, network namespaces and Go's binaries. Tests import
it as ``from support.<module> import ...`` (pyproject.toml puts tests/ on pytest's path);
public test support lives in nsqpy.testing. See docs/architecture-clusterinfo.md."""

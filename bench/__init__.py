"""nsqpy's benchmark suite: ``python -m bench <mode>``.

The workloads are NSQ's own bench tools (nsqio/nsq ``bench/bench_writer`` and
``bench/bench_reader``) plus a publish-to-deliver latency run and a resident-memory run, driven by
raw blocking sockets spread over several processes so the Python client is not the bottleneck.
Every mode can target any nsqd (``--nsqd-tcp-address``/``--nsqd-http-address``), Go's included;
by default it starts ``nsqpy-d`` on loopback with ephemeral ports and a temporary data dir.
See docs/performance.md.
"""

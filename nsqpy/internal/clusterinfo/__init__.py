"""The cluster-info layer: what nsqpy-admin, nsq_stat and nsq_to_file ask nsqlookupd and nsqd
about the cluster, as Go's internal/clusterinfo serves nsqadmin and the tools.

Strategy: three modules, each importing only those before it:

- ``types``: the records (producers, topic, channel and client stats) and Go's rules for
  merging and adding them up; pure, no I/O;
- ``http_client``: NSQ's V1 HTTP client (internal/http_api.Client) with Go's error texts;
- ``data``: ClusterInfo, the reads (fan-out to every daemon at once, partial errors) and the
  actions (create, delete, pause, tombstone) over that client.

This package imports none of its modules (so ``types`` loads without aiohttp): import them by
name. See docs/architecture-clusterinfo.md."""

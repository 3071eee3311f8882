"""What nsqpy's daemons and tools share (nsqpy-d, nsqpy-lookupd, nsqpy-admin, `nsqpy <tool>`), as
NSQ's internal/ is for its Go programs: Go semantics (flags, durations, JSON, addresses, the lg
log format), the HTTP layer, the cluster-info layer (clusterinfo/), process lifecycle and file
helpers. Nothing here imports a daemon's own modules."""

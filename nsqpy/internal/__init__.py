"""What nsqpy's daemons share (nsqpy-d, nsqpy-lookupd, nsqpy-admin), as NSQ's internal/ is for its
Go daemons: Go semantics (flags, durations, JSON, addresses, the lg log format), the HTTP layer,
process lifecycle and file helpers. Nothing here imports a daemon's own modules."""

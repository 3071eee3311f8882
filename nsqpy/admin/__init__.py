"""nsqpy-admin: nsqadmin (NSQ 1.3)'s web UI and JSON API for an NSQ cluster, in Python."""

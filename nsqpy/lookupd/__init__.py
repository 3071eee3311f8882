"""nsqpy-lookupd: a drop-in nsqlookupd (NSQ 1.3): the registration DB (pure), the "  V1" TCP
protocol, the HTTP API and the command line. See registration_db.py for the model."""

"""`python -m nsqpy.lookupd`: the nsqpy-lookupd command line."""

from .cli import main

main()

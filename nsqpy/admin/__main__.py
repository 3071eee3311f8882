"""`python -m nsqpy.admin`: the nsqpy-admin command line."""

from .cli import main

main()

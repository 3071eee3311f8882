"""python -m nsqpy: nsqpy-d, the nsqd command line (cli.main)."""

from .cli import main

main()

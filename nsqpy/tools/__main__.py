"""`python -m nsqpy.tools`: the `nsqpy` command (tools/__init__.py's click group)."""

from . import main

main()

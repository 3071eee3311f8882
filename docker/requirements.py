#!/usr/bin/env python3
"""Print a pip requirements list from pyproject.toml, for docker/Dockerfile's dependency layers.

    python requirements.py pyproject.toml            # build-system requires + dependencies
    python requirements.py pyproject.toml spark      # the `spark` extra only

The image installs these before it copies the sources, so an edit to nsqpy/ rebuilds only the
last layers (and `pip install --no-deps --no-build-isolation .` needs no index). Standard library
only (tomllib, Python 3.11+).
"""

from __future__ import annotations

import sys
import tomllib


def requirements(pyproject: str, extras: list[str]) -> list[str]:
    with open(pyproject, "rb") as f:
        data = tomllib.load(f)
    if extras:
        optional = data["project"]["optional-dependencies"]
        return [r for e in extras for r in optional[e]]
    return [*data["build-system"]["requires"], *data["project"]["dependencies"]]


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1], sys.argv[2:])))

#!/bin/sh
# docker/install-wheel.sh: what every runtime stage of docker/Dockerfile runs once the build
# stage's compiled wheel is in /tmp/wheels/ (COPY --from=build /wheels/ /tmp/wheels/). Installs it
# without dependencies (the stage's earlier layers hold them), removes the wheel, and checks the
# console scripts: each daemon answers --version, and nsqpy-d's names the compiled build (its
# version line ends "-mypyc)"), so an image never ships the slower pure package unnoticed.
set -eu
pip install --no-deps /tmp/wheels/nsqpy-*.whl
rm -rf /tmp/wheels
nsqpy-d --version | grep -- '-mypyc)'
nsqpy-lookupd --version
nsqpy-admin --version

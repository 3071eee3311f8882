#!/usr/bin/env bash
# docker/check.sh: build the images and check docker/compose.yaml end to end with podman.
#
#   PYTHON_IMAGE=localhost/nsqpy-python:3.11-bookworm docker/check.sh
#
# Builds the daemon image (nsqpy:dev), the Spark image (nsqpy-spark:dev) and compose's
# Prometheus (nsqpy-prometheus:dev: Debian's package and docker/prometheus/) from this checkout
# (layers cached by podman: an edit to nsqpy/ rebuilds only the last layers), then runs
# docker/check_cluster.py: the cluster with podman-compose, every health check healthy, the Spark
# job (on the standalone master and two workers) counting every published event through both
# lookupds while lookupd1 and nsqd2 are killed and restarted, nsqpy-admin listing three nodes.
# It prints `figure ...` lines and PASS/FAIL; the exit status is check_cluster.py's.
#
# Environment: PODMAN (command, may carry flags), PODMAN_COMPOSE, PYTHON_IMAGE (the base image;
# default python:3.11-slim-bookworm; docker/ci.sh passes its locally built stand-in),
# CONTAINERS_CONF. Arguments go to check_cluster.py (--events, --rate, --keep, ...).
# docker/ci.sh installs what this needs and runs it where podman can run containers.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
PODMAN=${PODMAN:-podman}
PODMAN_COMPOSE=${PODMAN_COMPOSE:-podman-compose}
PYTHON_IMAGE=${PYTHON_IMAGE:-python:3.11-slim-bookworm}
export PODMAN PODMAN_COMPOSE

start=$(date +%s)
revision=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -n 1)
built=0
for spec in nsqpy:nsqpy:dev spark:nsqpy-spark:dev prometheus:nsqpy-prometheus:dev; do
    target=${spec%%:*}
    tag=${spec#*:}
    t=$(date +%s)
    echo "check.sh: building $tag (target $target, base $PYTHON_IMAGE)"
    if ! timeout 1500 $PODMAN build --network host --format docker \
        -f "$HERE/Dockerfile" --ignorefile "$HERE/Dockerfile.dockerignore" \
        --build-arg PYTHON_IMAGE="$PYTHON_IMAGE" --build-arg VERSION="$version" \
        --build-arg REVISION="$revision" --target "$target" -t "$tag" "$ROOT" \
        >"/tmp/nsqpy-check-build-$target.log" 2>&1; then
        tail -n 40 "/tmp/nsqpy-check-build-$target.log"
        echo "FAIL: building $tag"
        exit 1
    fi
    size=$($PODMAN image inspect --format '{{.Size}}' "$tag")
    echo "figure image $tag: built in $(($(date +%s) - t))s, $((size / 1000000)) MB"
    built=$((built + 1))
done
echo "figure images built: $built in $(($(date +%s) - start))s"
rc=0
timeout 1800 python3 "$HERE/check_cluster.py" "$@" || rc=$?
echo "figure check.sh total: $(($(date +%s) - start))s"
exit $rc

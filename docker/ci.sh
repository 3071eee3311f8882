#!/usr/bin/env bash
# docker/ci.sh: what .ci/run calls for the container check. Installs what docker/check.sh needs
# (podman, runc, debootstrap from apt; podman-compose from PyPI in a tool venv), builds the
# stand-in base image where none can be pulled (docker/podman/base.sh), and runs docker/check.sh
# where podman can run a container. Where it cannot (not root, no apt, podman fails to start a
# container), it prints why it skips and exits 0. Idempotent: each step is skipped when its
# result is there (packages, tool venv, base images, podman's layer cache), so a second run
# spends its time in the cluster check itself. Bounded: each step has a timeout, the whole run
# NSQPY_DOCKER_CI_TIMEOUT seconds (default 1800). Exit status: check.sh's (0 when skipped).
#
# Environment: NSQPY_DOCKER_CI=0 skips on purpose; NSQPY_DOCKER_TOOLS (default /opt/nsqpy-tools)
# holds the podman-compose venv; PYTHON_IMAGE set uses that base image instead of building one.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOOLS=${NSQPY_DOCKER_TOOLS:-/opt/nsqpy-tools}
COMPOSE_VERSION=1.6.0
start=$(date +%s)

skip() {
    echo "docker/ci.sh: SKIP (container check not run): $*"
    exit 0
}
step() { echo "docker/ci.sh: [$(($(date +%s) - start))s] $*"; }

[ "${NSQPY_DOCKER_CI:-1}" = 0 ] && skip "NSQPY_DOCKER_CI=0"
[ "$(id -u)" = 0 ] || skip "needs root (apt-get, debootstrap, rootful podman)"
command -v python3 >/dev/null || skip "no python3"

# Re-run under one overall time bound.
if [ -z "${NSQPY_DOCKER_CI_BOUNDED:-}" ]; then
    export NSQPY_DOCKER_CI_BOUNDED=1
    timeout --kill-after=30 "${NSQPY_DOCKER_CI_TIMEOUT:-1800}" bash "$0" "$@"
    rc=$?
    [ $rc = 124 ] && echo "docker/ci.sh: FAIL: over ${NSQPY_DOCKER_CI_TIMEOUT:-1800}s"
    exit $rc
fi

# 1. Packages.
missing=()
for p in podman runc debootstrap; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || skip "no apt-get to install ${missing[*]}"
    step "apt-get install ${missing[*]}"
    timeout 600 apt-get update -qq >/tmp/nsqpy-ci-apt.log 2>&1 \
        && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq "${missing[@]}" \
            >>/tmp/nsqpy-ci-apt.log 2>&1 \
        || { tail -n 20 /tmp/nsqpy-ci-apt.log; skip "apt-get install ${missing[*]} failed"; }
fi

# 2. podman-compose in its own venv (kept apart from the project's).
PODMAN_COMPOSE=$TOOLS/podman-compose/bin/podman-compose
if ! "$PODMAN_COMPOSE" --version 2>/dev/null | grep -q "podman-compose version $COMPOSE_VERSION"; then
    step "podman-compose $COMPOSE_VERSION into $TOOLS/podman-compose"
    mkdir -p "$TOOLS"
    { python3 -m venv "$TOOLS/podman-compose" \
        && timeout 600 "$TOOLS/podman-compose/bin/pip" install -q \
            "podman-compose==$COMPOSE_VERSION"; } >/tmp/nsqpy-ci-pip.log 2>&1 \
        || { tail -n 20 /tmp/nsqpy-ci-pip.log; skip "pip install podman-compose failed"; }
fi

# 3. podman with this machine's settings (docker/podman/containers.conf: runc, cgroupfs, no
#    ulimit override); can it run a container at all?
export CONTAINERS_CONF=${CONTAINERS_CONF:-$HERE/podman/containers.conf}
export PODMAN=podman PODMAN_COMPOSE
timeout 120 podman info >/tmp/nsqpy-ci-podman.log 2>&1 \
    || { tail -n 20 /tmp/nsqpy-ci-podman.log; skip "podman info fails"; }

# 4. The base image: given, or the stand-in built here.
if [ -z "${PYTHON_IMAGE:-}" ]; then
    step "base image (docker/podman/base.sh)"
    PYTHON_IMAGE=$(timeout 1200 "$HERE/podman/base.sh" 2>/tmp/nsqpy-ci-base.log | tail -n 1)
    [ -n "$PYTHON_IMAGE" ] || { tail -n 30 /tmp/nsqpy-ci-base.log; skip "no base image (see above)"; }
fi
export PYTHON_IMAGE
probe=$(timeout 120 podman run --rm --network none "$PYTHON_IMAGE" python3 -c 'print("ok")' 2>&1)
[ "$probe" = ok ] || skip "podman cannot run a container here: ${probe:0:500}"
step "podman runs containers; base $PYTHON_IMAGE"

# 5. The check.
rc=0
"$HERE/check.sh" "$@" || rc=$?
step "done (check.sh exit $rc)"
exit $rc

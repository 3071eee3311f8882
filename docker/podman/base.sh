#!/usr/bin/env bash
# Builds the stand-in for python:3.11-slim-bookworm where no image can be pulled, and prints its
# tag on the last line of stdout. Steps (each skipped when its result exists, so a second run
# takes a few seconds): debootstrap --variant=minbase bookworm into a temp dir (about 25 s plus
# downloads), imported as localhost/bookworm-min; then Containerfile.base on top of it (Debian's
# Python 3.11, pip, venv; the host's CA bundle) tagged localhost/nsqpy-python:3.11-bookworm.
# Needs root, debootstrap and podman (docker/ci.sh installs them); PODMAN may add flags.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PODMAN=${PODMAN:-podman}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
MIN=localhost/bookworm-min
TAG=${NSQPY_PYTHON_IMAGE_TAG:-localhost/nsqpy-python:3.11-bookworm}

if ! $PODMAN image exists "$MIN"; then
    dir=$(mktemp -d /var/tmp/bookworm-min.XXXXXX)
    trap 'rm -rf "$dir"' EXIT
    echo "base.sh: debootstrap --variant=minbase bookworm ($MIRROR)" >&2
    timeout 900 debootstrap --variant=minbase bookworm "$dir" "$MIRROR" >"$dir.log" 2>&1 || {
        tail -n 20 "$dir.log" >&2
        rm -f "$dir.log"
        exit 1
    }
    rm -f "$dir.log"
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
    tar -C "$dir" -c . | $PODMAN import - "$MIN" >/dev/null
    rm -rf "$dir"
    trap - EXIT
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$HERE/Containerfile.base" "$ctx/Containerfile"
cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
timeout 900 $PODMAN build --network host --format docker --build-arg BOOKWORM_MIN="$MIN" \
    -t "$TAG" "$ctx" >&2
echo "$TAG"

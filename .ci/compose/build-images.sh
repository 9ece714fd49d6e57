#!/usr/bin/env bash
# Builds every image the compose test runs, here, without a registry: a Debian base made with
# debootstrap, and local substitutes for the official images CI cannot pull (see
# docker-compose.ci.yml).
# Run as root on a Debian machine with dockerd running; images already built are reused.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONTEXT=.ci/compose/images
BASE=local/bookworm:minbase

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

if ! have_image "$BASE"; then
    echo "compose images: debootstrap $BASE"
    rootfs="$(mktemp -d)"
    # The machine's own mirror, read from its apt sources (never written into the repository).
    mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
    debootstrap --variant=minbase bookworm "$rootfs" "${mirror:-http://deb.debian.org/debian}" >/dev/null
    rm -f "$rootfs"/etc/apt/sources.list
    cp /etc/apt/sources.list.d/*.sources "$rootfs"/etc/apt/sources.list.d/
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import -c 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
    rm -rf "$rootfs"
fi

# pip inside a build needs the machine's extra CA certificates: copied into the (git-ignored)
# build context at build time, never committed, and only into the CI Python image (the Temporal
# stand-in's pip runs on it too).
mkdir -p "$CONTEXT/python/ca-certificates"
cp /usr/local/share/ca-certificates/*.crt "$CONTEXT/python/ca-certificates/" 2>/dev/null || true

build() {
    local tag="$1"; shift
    echo "compose images: $tag"
    # Quiet unless it fails (the legacy builder's deprecation notice included).
    if ! output="$(docker build --build-arg BASE_IMAGE="$BASE" -t "$tag" "$@" 2>&1)"; then
        printf '%s\n' "$output" >&2
        exit 1
    fi
}

build local/python:3.11 "$CONTEXT/python"
build local/postgres:15 "$CONTEXT/postgres"
build local/temporal:1.9.1 "$CONTEXT/temporal"
build local/nginx:bookworm "$CONTEXT/nginx"
build local/prometheus:bookworm "$CONTEXT/prometheus"
# The project's own image is not built here: the README's `docker compose build` builds it from
# the repository's Dockerfile, on local/python:3.11 (docker-compose.ci.yml passes BASE_IMAGE).

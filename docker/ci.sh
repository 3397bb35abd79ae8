#!/usr/bin/env bash
# Build fwx's images and run them as a user would (tests/docker/test_images.py); `make docker-test`.
#
# On a bare Debian machine it brings what it needs:
#   * the engine: Debian's docker.io when dockerd is missing; dockerd started in the background when
#     none answers, with no bridge and no iptables rules (the containers use the host's network on
#     loopback ports, so no bridge and no private-range address is ever created);
#   * the base image: the Dockerfiles' own ARG base (python:3.11-slim-bookworm) when the registry
#     answers; otherwise Debian bookworm + python3.11 made by debootstrap and `docker import`ed.
#     The debootstrap tarball is cached (FWX_CI_CACHE, default ~/.cache/fwx-ci), and the engine's
#     layer cache keeps the pip layers between runs on the same machine.
# Then it builds docker/Dockerfile (the CPU image) and the image `fwx dockerize` writes for a tiny
# repository, and runs the image tests against both. Timings go to $FWX_CI_CACHE/docker-ci.json.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PY:-.venv/bin/python}"
CACHE="${FWX_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fwx-ci}"
OFFICIAL_BASE="python:3.11.14-slim-bookworm"
LOCAL_BASE="${FWX_CI_BASE_TAG:-fwx-ci-base:bookworm-py311}"  # another tag (and FWX_CI_CACHE) = a fresh base
CPU_TAG="fwx-ci:cpu"
MODELS_TAG="fwx-ci-models:latest"
ALL_TAG="fwx-ci:cpu-all"
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
mkdir -p "$CACHE"
declare -A SECONDS_TAKEN=()

say() { echo "docker-ci: $*" >&2; }
timed() {  # timed NAME CMD...: run CMD, remember how long it took
    local name=$1 start=$SECONDS
    shift
    "$@"
    SECONDS_TAKEN[$name]=$((SECONDS - start))
    say "$name took ${SECONDS_TAKEN[$name]} s"
}

apt_install() {
    say "installing Debian packages: $*"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

engine() {
    command -v dockerd >/dev/null 2>&1 || apt_install docker.io
    docker info >/dev/null 2>&1 && return 0
    local deadline=$((SECONDS + 90)) pid
    pid=$(cat /var/run/docker.pid 2>/dev/null || true)
    while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && ! docker info >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || { say "dockerd (pid $pid) neither answers nor exits"; exit 1; }
        sleep 1  # a daemon still starting or stopping: wait for it rather than start a second one
    done
    docker info >/dev/null 2>&1 && return 0
    say "starting dockerd (no bridge, no iptables; log: $CACHE/dockerd.log)"
    $SUDO sh -c "nohup dockerd --bridge=none --iptables=false --ip-masq=false --ip6tables=false \
        >'$CACHE/dockerd.log' 2>&1 &"
    until docker info >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || { tail -20 "$CACHE/dockerd.log" >&2; say "dockerd did not start"; exit 1; }
        sleep 1
    done
}

debootstrap_tarball() {  # Debian bookworm with python3.11, as a tarball for `docker import`
    local tarball="$CACHE/bookworm-py311.tar" root
    if [ -s "$tarball" ]; then echo "$tarball"; return 0; fi
    command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap >&2
    root=$(mktemp -d)
    say "debootstrap bookworm into $root (cached as $tarball)"
    $SUDO debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates,passwd \
        bookworm "$root" http://deb.debian.org/debian >&2
    # This machine's CA bundle and a pip.conf naming it: behind a TLS-inspecting proxy the image's pip
    # must trust what the host trusts (on a normal machine the bundle is Debian's own anyway).
    $SUDO cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' | $SUDO tee "$root/etc/pip.conf" >/dev/null
    $SUDO rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
    $SUDO tar -C "$root" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    $SUDO rm -rf "$root"
    echo "$tarball"
}

base_image() {  # prints the base to build on
    if docker image inspect "$OFFICIAL_BASE" >/dev/null 2>&1 || timeout 120 docker pull -q "$OFFICIAL_BASE" >/dev/null 2>&1; then
        echo "$OFFICIAL_BASE"
        return 0
    fi
    if ! docker image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
        say "the registry base cannot be pulled: making $LOCAL_BASE"
        docker import "$(debootstrap_tarball)" "$LOCAL_BASE" >/dev/null
    fi
    echo "$LOCAL_BASE"
}

torch_index() {  # sets TORCH_INDEX: where the builds take CPU torch from
    TORCH_INDEX=https://download.pytorch.org/whl/cpu
    "$PY" -c "import urllib.request as u; u.urlopen('$TORCH_INDEX/torch/', timeout=15)" 2>/dev/null && return 0
    # Out of reach: the pinned CPU wheel, fetched with this machine's own pip configuration, in a
    # one-project simple index served on loopback (the builds run with --network host). pip trusts
    # 127.0.0.1 over plain HTTP, and an unreachable index would cost each package pip's retries.
    local index="$CACHE/torch-index" port
    if ! ls "$index/torch/"torch-*.whl >/dev/null 2>&1; then
        say "the CPU torch index is out of reach: fetching $(grep '^torch==' constraints.txt) into $index"
        "$PY" -m pip download -q --no-deps --only-binary :all: -d "$index/torch" "$(grep '^torch==' constraints.txt)"
    fi
    # A fixed port: the URL is a build arg, part of the dependency layers' cache key, so a new port
    # each run would reinstall every dependency. A port already taken costs that cache, not the run.
    port="${FWX_CI_INDEX_PORT:-43175}"
    if ! "$PY" -c "import socket, sys; socket.socket().bind(('127.0.0.1', int(sys.argv[1])))" "$port" 2>/dev/null; then
        port=$("$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
        say "port ${FWX_CI_INDEX_PORT:-43175} is taken: the torch index is on $port (the dependency layers rebuild)"
    fi
    "$PY" -m http.server --bind 127.0.0.1 --directory "$index" "$port" >/dev/null 2>&1 &
    INDEX_PID=$!
    trap 'kill "$INDEX_PID" 2>/dev/null || true' EXIT
    TORCH_INDEX="http://127.0.0.1:$port"
    local deadline=$((SECONDS + 30))
    until "$PY" -c "import urllib.request as u; u.urlopen('$TORCH_INDEX/torch/', timeout=2)" 2>/dev/null; do
        [ $SECONDS -lt $deadline ] || { say "the loopback torch index did not start"; exit 1; }
        sleep 0.2
    done
}

build_cpu() {
    DOCKER_BUILDKIT=0 docker build -q --network host --build-arg "PYTHON_IMAGE=$BASE" --build-arg "TORCH_INDEX=$TORCH_INDEX" \
        -f docker/Dockerfile -t "$CPU_TAG" . >/dev/null
}

publish_lin() {  # publish_lin REPO VERSION: the linear test model (y = 2x + 1), as `fwx export` publishes
    "$PY" - "$1" "$2" <<'EOF'
import sys
from pathlib import Path

sys.path.insert(0, "tests/serving")
import serving_models

serving_models.publish(Path(sys.argv[1]), "lin", *serving_models.build_linear(), int(sys.argv[2]))
EOF
}

dockerize_build() {  # dockerize_build REPO [docker build flags]: `fwx dockerize` then build it on the same base
    local repo=$1
    shift
    "$PY" -m fwx dockerize "$repo" --force --tag "$MODELS_TAG" >/dev/null
    DOCKER_BUILDKIT=0 docker build "$@" --network host --build-arg "BASE_IMAGE=$BASE" \
        --build-arg "TORCH_INDEX=$TORCH_INDEX" -t "$MODELS_TAG" "$repo"
}

build_dockerize() {  # a one-model repository, through `fwx dockerize`
    DOCKERIZE_WORK=$(mktemp -d)
    publish_lin "$DOCKERIZE_WORK/repo" 1
    dockerize_build "$DOCKERIZE_WORK/repo" -q >/dev/null
}

rebuild_dockerize() {  # the same repository with a new version, dockerized again: only the layers above
    # the dependencies may run (the dependency layer is keyed by the dependency list alone)
    local log="$CACHE/dockerize-rebuild.log"
    publish_lin "$DOCKERIZE_WORK/repo" 2
    dockerize_build "$DOCKERIZE_WORK/repo" >"$log"
    rm -rf "$DOCKERIZE_WORK"
    if ! awk '/^Step .* : RUN .*fwx-deps/ { getline; cached = /Using cache/ } END { exit !cached }' "$log"; then
        say "the second fwx dockerize build reinstalled the dependencies (log: $log)"
        exit 1
    fi
    say "the second fwx dockerize build took the dependency layer from the cache"
}

size_mb() { docker image inspect -f '{{.Size}}' "$1" | awk '{printf "%.0f", $1 / 1e6}'; }

build_all() {  # the CPU image with every runtime (torch, TensorFlow, TFLite, ONNX, hf)
    DOCKER_BUILDKIT=0 docker build -q --network host --build-arg "PYTHON_IMAGE=$BASE" --build-arg FWX_EXTRAS=all \
        --build-arg "TORCH_INDEX=$TORCH_INDEX" \
        -f docker/Dockerfile -t "$ALL_TAG" . >/dev/null
}

images_test() {  # `make docker-test`: build the CPU and the `fwx dockerize` images, run the image tests
    timed engine engine
    timed base eval 'BASE=$(base_image)'
    say "base image: $BASE"
    torch_index
    timed build_cpu build_cpu
    timed build_dockerize build_dockerize
    timed dockerize_rebuild rebuild_dockerize
    say "sizes: $CPU_TAG $(size_mb "$CPU_TAG") MB, $MODELS_TAG $(size_mb "$MODELS_TAG") MB"
    FWX_DOCKER_IMAGES="$CPU_TAG,$MODELS_TAG" FWX_DOCKERIZE_IMAGE="$MODELS_TAG" \
        timed tests "$PY" -m pytest -q -s -p no:cacheprovider tests/docker/test_images.py
    cat >"$CACHE/docker-ci.json" <<EOF
{"base": "$BASE", "cpu_image_mb": $(size_mb "$CPU_TAG"), "dockerize_image_mb": $(size_mb "$MODELS_TAG"),
 "seconds": {"engine": ${SECONDS_TAKEN[engine]}, "base": ${SECONDS_TAKEN[base]},
             "build_cpu": ${SECONDS_TAKEN[build_cpu]}, "build_dockerize": ${SECONDS_TAKEN[build_dockerize]},
             "dockerize_rebuild": ${SECONDS_TAKEN[dockerize_rebuild]}, "tests": ${SECONDS_TAKEN[tests]}, "total": $SECONDS}}
EOF
    say "done in $SECONDS s ($CACHE/docker-ci.json)"
}

image_all() {  # `make docker-all`: build the `all` image, record its size, build time and cold starts
    timed engine engine
    timed base eval 'BASE=$(base_image)'
    say "base image: $BASE"
    torch_index
    timed build_all build_all
    say "size: $ALL_TAG $(size_mb "$ALL_TAG") MB"
    "$PY" docker/cold_start.py --runs "${FWX_CI_COLD_RUNS:-5}" "$ALL_TAG" >"$CACHE/cold-all.json"
    cat >"$CACHE/docker-all.json" <<EOF
{"base": "$BASE", "image": "$ALL_TAG", "size_mb": $(size_mb "$ALL_TAG"),
 "build_seconds": ${SECONDS_TAKEN[build_all]}, "cold_start": $(cat "$CACHE/cold-all.json"), "total": $SECONDS}
EOF
    cat "$CACHE/docker-all.json"
    say "done in $SECONDS s ($CACHE/docker-all.json)"
}

case "${1:-test}" in
    test) images_test ;;
    all) image_all ;;
    engine) engine ;;  # only start the engine, as the other modes would (for measuring by hand)
    *) say "usage: docker/ci.sh [test|all|engine]"; exit 2 ;;
esac

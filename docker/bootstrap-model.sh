#!/bin/sh
# Version 1 of the served model on a fresh deployment: a randomly initialised export of the
# preset's trainer architecture, hot-swapped in through `tengen models promote` (atomic version
# write, Triton load_model, wait for ready, announcement on tengen.models). Does nothing when the
# model already has a version, so it is safe on every `docker compose up` and as a Kubernetes Job.
#
# Environment: TENGEN_PRESET, TENGEN_DATA_DIR (repository = $TENGEN_DATA_DIR/models),
# TENGEN_TRITON_URL, TENGEN_KAFKA_BOOTSTRAP (unset: no announcement), TENGEN_RUN__MODEL_NAME
# (default tengen), TENGEN_TRITON__BACKEND (python = CPU; onnxruntime or pytorch = GPU; default python).
set -eu

data_dir="${TENGEN_DATA_DIR:-/data}"
model="${TENGEN_RUN__MODEL_NAME:-tengen}"
backend="${TENGEN_TRITON__BACKEND:-python}"

for version_dir in "$data_dir/models/$model"/[0-9]*/; do
    case "$(basename "$version_dir")" in *[!0-9]*) continue ;; esac  # versions are all digits
    if [ -d "$version_dir" ]; then
        echo "model $model already has a version in $data_dir/models; its config follows the preset"
        exec tengen models configure --model "$model"
    fi
done

arch="$(python -c 'import os; from tengen.config import load_config; print(load_config(os.environ.get("TENGEN_PRESET", "cpu")).trainer.arch)')"
workdir="$(mktemp -d)"
trap 'rm -rf "$workdir"' EXIT

tengen models init --arch "$arch" --out "$workdir/model.pt"
if [ -n "${TENGEN_KAFKA_BOOTSTRAP:-}" ]; then
    tengen models promote "$workdir/model.pt" --model "$model" --backend "$backend" --kafka "$TENGEN_KAFKA_BOOTSTRAP"
else
    tengen models promote "$workdir/model.pt" --model "$model" --backend "$backend"
fi

#!/bin/bash
# Start tritonserver in explicit model-control mode over the shared model repository, loading at
# start every model that already has a version (as `tengen triton` does locally). Explicit mode
# forgets loaded models on a restart, so without this a restarted Triton would serve nothing until
# the next promotion. Extra arguments go to tritonserver.
#
# Environment: TRITON_MODEL_REPOSITORY (default /models).
set -euo pipefail

repository="${TRITON_MODEL_REPOSITORY:-/models}"
load=()
for config in "$repository"/*/config.pbtxt; do
    [ -e "$config" ] || continue
    model_dir="$(dirname "$config")"
    if find "$model_dir" -mindepth 1 -maxdepth 1 -type d -regex '.*/[0-9]+' | grep -q .; then
        load+=("--load-model=$(basename "$model_dir")")
    fi
done
echo "tritonserver: repository $repository, loading: ${load[*]:-nothing yet}"

exec tritonserver \
    --model-repository="$repository" \
    --model-control-mode=explicit \
    --strict-readiness=true \
    --exit-timeout-secs=30 \
    --http-port=8000 --grpc-port=8001 --metrics-port=8002 \
    "${load[@]}" "$@"

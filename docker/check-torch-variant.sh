#!/bin/sh
# Fails the image build early, with a clear message, for a torch wheel index that has no build of
# the pinned torch. PyTorch's release matrix (RELEASE.md, "Release Compatibility Matrix") lists
# 2.13 with CUDA 12.6 and 13.0 (stable) and 13.2 (experimental); cu128 stopped at torch 2.11.
#   check-torch-variant.sh TORCH_VERSION TORCH_VARIANT
set -eu
version="$1"
variant="$2"
case "$version" in
  2.13.*) supported="cpu cu126 cu130 cu132" ;;
  *) echo "check-torch-variant: no list of CUDA variants for torch $version; add it here" >&2; exit 2 ;;
esac
for ok in $supported; do
  if [ "$variant" = "$ok" ]; then
    exit 0
  fi
done
echo "TORCH_VARIANT=$variant has no build of torch $version; use one of: $supported" \
     "(cu130 for current NVIDIA GPUs, cu126 for older ones)" >&2
exit 1

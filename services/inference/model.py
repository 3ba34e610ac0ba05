"""Triton Python-backend model: serves a tengen TorchScript export on the CPU.

Each version directory of the model holds a copy of this file next to `model.pt` (the export,
the same file the PyTorch backend serves on GPUs). The export's signature is fixed:
forward(spatial float32 [B, 18, H, W], globals float32 [B, 10]) -> (policy [B, H*W+1],
value [B, 3], score [B, 2], ownership [B, H, W]). Requests that the dynamic batcher hands over
together are run as one forward pass per board shape.

Runs inside Triton's Python stub, so it imports only torch, numpy and Triton's utilities.
The `precision` parameter is the one tengen.nn.evaluator.resolve_precision resolves ("auto": bf16
autocast where the CPU has native bf16, fp32 elsewhere); outputs are float32 either way.
"""
import json
import os

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

OUTPUT_NAMES = ("policy", "value", "score", "ownership")


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        threads = int(params.get("torch_threads", {}).get("string_value", "0") or 0)
        if threads > 0:
            torch.set_num_threads(threads)
        precision = params.get("precision", {}).get("string_value", "auto") or "auto"
        if precision not in ("auto", "bf16", "fp32"):
            raise ValueError("precision must be auto, bf16 or fp32, got %r" % precision)
        # bf16 convolutions are about 1.5x fp32 on CPUs with AVX512-BF16 and much slower without.
        self.bf16 = precision == "bf16" or (precision == "auto" and torch.ops.mkldnn._is_mkldnn_bf16_supported())
        path = os.path.join(args["model_repository"], args["model_version"], "model.pt")
        self.module = torch.jit.load(path, map_location="cpu")
        self.module.eval()
        self.name = "%s v%s (%s)" % (args["model_name"], args["model_version"], "bf16" if self.bf16 else "fp32")

    def execute(self, requests):
        responses = [None] * len(requests)
        groups = {}
        inputs = []
        for i, request in enumerate(requests):
            spatial = pb_utils.get_input_tensor_by_name(request, "spatial").as_numpy()
            glob = pb_utils.get_input_tensor_by_name(request, "globals").as_numpy()
            if spatial.ndim != 4 or glob.ndim != 2 or spatial.shape[0] != glob.shape[0]:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "%s: spatial must be [B, C, H, W] and globals [B, G] with the same B, got %s and %s"
                    % (self.name, list(spatial.shape), list(glob.shape))))
                continue
            inputs.append((spatial, glob))
            groups.setdefault(spatial.shape[1:], []).append((i, len(inputs) - 1))
        for members in groups.values():
            spatial = np.concatenate([inputs[j][0] for _, j in members])
            glob = np.concatenate([inputs[j][1] for _, j in members])
            try:
                with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
                    outs = self.module(torch.from_numpy(spatial), torch.from_numpy(glob))
            except Exception as exc:  # a bad batch must fail its requests, not the model
                for i, _ in members:
                    responses[i] = pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("%s: forward failed: %s" % (self.name, exc)))
                continue
            arrays = [o.float().contiguous().numpy() for o in outs]
            start = 0
            for i, j in members:
                n = inputs[j][0].shape[0]
                responses[i] = pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor(name, np.ascontiguousarray(a[start:start + n]))
                    for name, a in zip(OUTPUT_NAMES, arrays)])
                start += n
        return responses

    def finalize(self):
        self.module = None

"""Triton Python-backend model: serves a tengen TorchScript export on the CPU.

Each version directory of the model holds a copy of this file next to `model.pt` (the export,
the same file the PyTorch backend serves on GPUs). The export's signature is fixed:
forward(spatial float32 [B, 18, H, W], globals float32 [B, 10]) -> (policy [B, H*W+1],
value [B, 3], score [B, 2], ownership [B, H, W], uncertainty [B, 2]); an export from before the
uncertainty output returns the first four, and this model adds UNKNOWN_UNCERTAINTY for it (as
tengen.nn.export.complete_outputs does in-process). Requests that the dynamic batcher hands over
together are run as one forward pass per board shape.

Runs inside Triton's Python stub, so it imports only torch, OpenVINO, numpy and Triton's
utilities (this file is copied into every version directory; tengen.nn.evaluator holds the same
choices for in-process evaluation). Parameters:
- `runtime`: "openvino" compiles the frozen TorchScript with OpenVINO (1.8x torch's evals/s for
  the cpu preset's small net, which spends its time in per-op overhead under torch), "torch" runs
  it as it is, "auto" takes OpenVINO where it is installed.
- `precision`: "auto" computes in bf16 where the CPU has native bf16 (AVX512-BF16, AMX) and in
  fp32 elsewhere, where bf16 is emulated and slower; outputs are float32 either way.
- `torch_threads`: the threads of one instance (torch's or OpenVINO's).
"""
import json
import os

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

OUTPUT_NAMES = ("policy", "value", "score", "ownership", "uncertainty")
UNKNOWN_UNCERTAINTY = -1.0
NUM_SPATIAL, NUM_GLOBAL = 18, 10


def _openvino_bf16():
    import openvino as ov

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def _openvino_model(module, threads, bf16):
    """The export compiled by OpenVINO for dynamic batch and board size (freezing folds the
    scripted module's eval-mode branches, which OpenVINO's TorchScript frontend cannot convert)."""
    import openvino as ov

    example = (torch.zeros(1, NUM_SPATIAL, 9, 9), torch.zeros(1, NUM_GLOBAL))
    # convert_model's telemetry (on unless a consent file says no) forks a process from this threaded
    # stub, which deadlocked; it stays off in CI, which CI=true declares (tengen.nn.evaluator does
    # the same).
    os.environ["CI"] = "true"
    model = ov.convert_model(torch.jit.freeze(module), example_input=example,
                             input=[ov.PartialShape([-1, NUM_SPATIAL, -1, -1]), ov.PartialShape([-1, NUM_GLOBAL])])
    compiled = ov.Core().compile_model(model, "CPU", {
        "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32",
        "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1})
    return compiled.create_infer_request()


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        # A repository configured before the uncertainty output declares only the first four; a
        # response must not carry an output its config does not have.
        self.declared = {o["name"] for o in config.get("output", [])}
        params = config.get("parameters", {})
        threads = int(params.get("torch_threads", {}).get("string_value", "0") or 0)
        if threads > 0:
            torch.set_num_threads(threads)
        precision = params.get("precision", {}).get("string_value", "auto") or "auto"
        if precision not in ("auto", "bf16", "fp32"):
            raise ValueError("precision must be auto, bf16 or fp32, got %r" % precision)
        runtime = params.get("runtime", {}).get("string_value", "auto") or "auto"
        if runtime not in ("auto", "torch", "openvino"):
            raise ValueError("runtime must be auto, torch or openvino, got %r" % runtime)
        if runtime == "auto":
            try:
                import openvino  # noqa: F401
                runtime = "openvino"
            except ImportError:
                runtime = "torch"
        path = os.path.join(args["model_repository"], args["model_version"], "model.pt")
        self.module = torch.jit.load(path, map_location="cpu")
        self.module.eval()
        self.request = None
        if runtime == "openvino":
            self.bf16 = precision == "bf16" or (precision == "auto" and _openvino_bf16())
            self.request = _openvino_model(self.module, max(threads, 0), self.bf16)
        else:
            self.bf16 = precision == "bf16" or (precision == "auto" and torch.ops.mkldnn._is_mkldnn_bf16_supported())
        self.name = "%s v%s (%s %s)" % (args["model_name"], args["model_version"], runtime,
                                        "bf16" if self.bf16 else "fp32")

    def _forward(self, spatial, glob):
        if self.request is not None:
            outputs = self.request.infer({0: spatial, 1: glob})
            arrays = [np.ascontiguousarray(outputs[i], dtype=np.float32) for i in range(len(outputs))]
        else:
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
                outs = self.module(torch.from_numpy(spatial), torch.from_numpy(glob))
            arrays = [o.float().contiguous().numpy() for o in outs]
        if len(arrays) < len(OUTPUT_NAMES):  # an export from before the uncertainty output
            arrays.append(np.full((spatial.shape[0], 2), UNKNOWN_UNCERTAINTY, np.float32))
        return arrays

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
                arrays = self._forward(spatial, glob)
            except Exception as exc:  # a bad batch must fail its requests, not the model
                for i, _ in members:
                    responses[i] = pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("%s: forward failed: %s" % (self.name, exc)))
                continue
            start = 0
            for i, j in members:
                n = inputs[j][0].shape[0]
                responses[i] = pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor(name, np.ascontiguousarray(a[start:start + n]))
                    for name, a in zip(OUTPUT_NAMES, arrays) if name in self.declared])
                start += n
        return responses

    def finalize(self):
        self.module = self.request = None

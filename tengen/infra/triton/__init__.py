"""Triton: the model repository (repository), a local server from the nvidia-pytriton wheel
(server), the gRPC client and evaluator (client), and their errors (errors). The hot swap that
uses all three is tengen.gate.promotion."""

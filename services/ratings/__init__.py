"""The ratings service: `python -m services.ratings` (gRPC + HTTP over tengen.ratings)."""

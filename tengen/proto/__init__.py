"""Python bindings generated from the repository's `proto/*.proto` files.

Regenerate with `python -m tengen.proto.generate` after editing a .proto file; a test checks that
the committed bindings match what the generator produces.
"""

"""Gating: candidate-against-champion matches, the promotion decision and its ledger, and the
hot swap of a promoted version into Triton."""

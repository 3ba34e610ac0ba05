"""Gating: candidate-against-champion matches, the promotion decision, and the hot swap of a
promoted version into Triton (its ledger on disk is tengen.loop.ledger)."""

"""GTP: the engine behind `tengen gtp`, the client that drives other engines, the match runner."""

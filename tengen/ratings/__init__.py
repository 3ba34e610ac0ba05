"""Ratings: Bayesian Elo of model versions and other players from rated games.

elo (the fit), records (what a report may contain), store (SQL + migrations), book (the reads),
config (settings and env overrides), csvfile (tournament import), wire (protobuf conversions) and
client (gRPC client of the ratings service, `services/ratings`).
"""

"""What ties the loop's stages together, the contracts each stage reads and writes: the data dir's
layout (layout), the messages between the services (messages), the game record and the training
rows made from it (rows), and gating's ledger on disk (ledger)."""

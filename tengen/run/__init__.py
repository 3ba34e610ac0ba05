"""`tengen run`: the whole training loop on one machine (broker, Triton, ratings, trainer, gating,
selfplay) as supervised child processes, with a live status view.

- ports.py: which TCP ports the servers get (the configured ones when free).
- bootstrap.py: what a new data dir needs before selfplay can start (model version 1).
- supervisor.py: child processes and servers, restarts with backoff, the ordered shutdown.
- status.py: the progress figures read from metrics and the data dir, and their rendering.
- local.py: the run itself, wiring the above together.
- chaos.py: the fault drill (`tengen chaos`).
- in_process.py: the loop in one process without services (self-play, window, learner), for
  `tengen bench ab` and the learning tests.
"""

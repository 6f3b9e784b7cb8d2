"""The page engine, shared by both roles: what happens to a URL between its source and its outcome.

- :mod:`.politeness`: host and address slots, delays, adaptive delay and throttle blocks (Mercator's back-queue
  heap); the embedded pools pop through it, and so does the worker's queue of its jobs' URLs;
- :mod:`.hostqueue`: URLs waiting per host for their turn, in memory, for a source that is not a pool (the
  worker's jobs);
- :mod:`.steps`: a fetched answer to its outcome: archive, throttle, 304, redirect claim, parse, links,
  duplicate content, store, item.

A role decides where URLs come from (a pool's lease, a job's list) and where outcomes go (pool statuses, a job's
items file); the engine does the same steps for both, so a fetch feature is written once.
"""

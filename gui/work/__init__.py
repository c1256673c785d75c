"""Background work: the worker pool and its jobs."""

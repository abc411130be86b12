"""Models and inference: the repository, runtimes, control, batching, the dataplane."""

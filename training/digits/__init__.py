"""Digit classifiers on MNIST-style IDX data: SineKAN and its baselines."""

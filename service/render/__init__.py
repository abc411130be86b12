"""Rendering: the render service, its cache, the tile scheduler, sampling, the separable body."""

"""The geometry of an image model's unit square, shared by inference (a query's points), renders and the
protocols: affine transforms and render frames (transform.py), and sampling at points with a background
outside the square (sampling.py). Pure numpy: it imports nothing of the service."""

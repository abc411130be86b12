"""HTTP service for the model repository: coordinate queries, rendering and digit classification.

Runs on onnxruntime, numpy, FastAPI and Pillow only; importing it never imports torch.
"""

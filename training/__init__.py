"""Training package: fit implicit neural representations and export them to ONNX."""

"""The Open Inference Protocol (KServe V2, as Triton speaks it over HTTP): routes, tensors, model config."""

from .routes import router

__all__ = ["router"]

"""Python client for the INR service: `Client` (sync), `AsyncClient` (asyncio), and a CLI
(`python -m inr_client`). Large renders are fetched as tiles and stitched."""

from .api import DEFAULT_URL, AsyncClient, Client
from .calls import ClientError, Prediction, ServiceError

__all__ = ["AsyncClient", "Client", "ClientError", "DEFAULT_URL", "Prediction", "ServiceError"]

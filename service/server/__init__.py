"""The HTTP server's guards: the drain, the body limit and timeouts, the restricted API."""

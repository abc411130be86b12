"""The HTTP server's guards: the drain, timeouts, the restricted API."""

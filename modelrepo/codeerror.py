"""The error of both table codes (modelrepo/tablecode.py, modelrepo/ctxcode.py)."""


class CodeError(ValueError):
    """Bytes that are not a coded table, or a table a code does not hold."""

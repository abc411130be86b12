"""Who is asking, and whether they may read a model (docs/access.md).

`tokens`: signed bearer tokens with an expiry, verified without a lookup. `caller`: the caller of a request, from
its `Authorization: Bearer` header or the access service's cookie. `policy`: a model's config.pbtxt access policy
(modelrepo/access.py) against a caller: allowed, its substitute only, or refused (401 without credentials, 403
with credentials that lack the scope).
"""

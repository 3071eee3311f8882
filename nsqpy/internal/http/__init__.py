"""The HTTP layer every nsqpy daemon shares: NSQ's answers over Go's net/http rules.

Strategy: five small modules, each importing only those before it, so nothing circles:

- ``head``: a request head read in bounded slices, with net/http's 1 MiB limit and its 431;
- ``request``: a Request and a Response as handlers see them, and Go's URL decoding;
- ``v1``: NSQ's V1 answers (internal/http_api.RespondV1) and its error shape;
- ``router``: julienschmidt/httprouter's rules (redirects, 405, OPTIONS) and the route table;
- ``server``: the HTTP/1.1 server (heads by ``head``, bodies by h11) that nsqpy-d and
  nsqpy-lookupd listen with.

``aio`` adapts the same rules to aiohttp for nsqpy-admin; only nsqpy-admin imports it, so the
daemons never load aiohttp. This package imports none of its modules: import them by name.
"""

"""``treadle serve --workers N``: conversations run in N worker processes behind one front.

The ``treadle serve`` process is the front (``front``): it owns the public socket, checks every
request as a single server does (``SecurityMiddleware``: Host, Origin, keys, body size) and
forwards HTTP and WebSockets, streamed, to the workers (``link``), each a whole agent server
(``create_app``) listening on a unix socket in a private 0700 folder (``supervisor``, which
also restarts a worker that dies and stops them all with the front). A request about one
conversation goes to the worker its id hashes to (``routing``), so its shell, its live output
and an OpenHands client's in-memory key stay in one process; ids a worker makes hash to itself.
Everything shared across workers already is across servers: the store, the run leases and the
requests recorded in the log (``server/runs.py``).
"""

"""Treadle: a durable, branchable, auditable event stream runtime for AI agents.

The pure event core lives in :mod:`treadle.events`; storage, runtime and server build on it.
"""

__version__ = "0.1.0"

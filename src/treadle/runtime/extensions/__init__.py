"""Run extensions: the capabilities a conversation's run loop calls at its typed points.

The protocol is ``base``; the capabilities and their order are ``chain.run_extensions``. This
package's own namespace holds only the protocol, so that a capability's package may use it
without importing every other capability.
"""

from treadle.runtime.extensions.base import MADE_ROOM, CallResult, RunExtension, RunScope, Screened

__all__ = ["MADE_ROOM", "CallResult", "RunExtension", "RunScope", "Screened"]

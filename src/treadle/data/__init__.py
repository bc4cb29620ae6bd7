"""``treadle.data``: the conversation's data models that the runtime, the server and the client
all read: settings (and their hooks, MCP servers, network allow-list, model choices), statuses,
isolation facts, the transcript's items, the views a read, a restore or a diff returns, and the
conversation id's rule. Pydantic and the event model only, no I/O: the runtime depends on this
package and never on :mod:`treadle.api` (the wire: request bodies, stream frames, the error
body, the client's handle protocol), which builds on it.

Import the submodule you need (``treadle.data.settings``); :mod:`treadle.api` and :mod:`treadle`
re-export the public names for users."""

"""The agent runtime: the model, tools and workspaces, the agent step and the conversation.

Submodules are imported directly (``treadle.runtime.tools``, ``treadle.runtime.workspace``, …).
"""

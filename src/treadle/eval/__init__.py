"""Evals: many frozen tasks run as conversations at once (on Ray), each in a fresh workspace,
with its patch and verification stored beside its conversation (docs/eval.md)."""

"""Condensation: the policy (what to forget), token counting, and the condenser that writes
the summary and the ``condensation`` event."""

"""A tiny calculator with a bug for the agent to fix."""


def add(a, b):
    return a - b


def mean(values):
    return sum(values) / len(values)

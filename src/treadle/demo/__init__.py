"""The demo: a scripted-model run with real tools, showing the event contracts at work."""

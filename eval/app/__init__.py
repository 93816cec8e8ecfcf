"""The demo server (python -m eval.app.server) and the run viewer (python -m eval.app.view)."""

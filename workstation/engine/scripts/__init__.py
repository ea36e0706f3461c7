"""Scripts that run inside the engine's own Python (never imported by the app)."""

"""One client of the engine's HTTP API.

OpenAI wire models, SSE parsing, metrics scrape, readiness.
"""

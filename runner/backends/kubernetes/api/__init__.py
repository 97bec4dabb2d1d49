"""Talking to the API server: calls with deadlines and bounded answers, streams, errors."""

"""Durable runs: a headless turn as a DBOS workflow whose model requests and tool calls are steps (README.md)."""

"""Checkpoints: the project's files as they were around each tool call that could change them, in a shadow git
repository of the data directory, and the rewinds that put the agent's changes back (README "Checkpoints and
rewind")."""

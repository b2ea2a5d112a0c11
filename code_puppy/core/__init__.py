"""The one run path every front end shares: the agent, the project, a conversation and its turns."""

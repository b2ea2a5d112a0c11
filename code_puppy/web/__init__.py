"""`code-puppy web`: a local dashboard of sessions and live runs (README.md in this folder lists its modules)."""

"""The fleet: queued runs (`code-puppy queue add`) taken by workers (`code-puppy worker`), README "Fleet"."""

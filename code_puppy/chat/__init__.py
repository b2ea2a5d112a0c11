"""Event sinks for the one run path: the headless text/JSON emitters and the interactive renderer."""

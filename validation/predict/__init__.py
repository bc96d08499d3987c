"""The predict entries' code that is imported as well as run (the replay tests read compare)."""

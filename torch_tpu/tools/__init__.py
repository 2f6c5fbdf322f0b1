"""Developer tools: op coverage and the OpInfo differential check."""

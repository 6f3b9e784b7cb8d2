"""Fetching and parsing, shared by the frontier's fetch loop and the worker: the fetcher, its connections
and name cache, robots.txt, extraction and the parser processes."""

"""A generated, deterministic demo site for the offline demo, the tests and the benchmark."""

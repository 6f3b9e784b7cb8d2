"""The frontier role: the URL pool and its backends, politeness, seeds, the seed timer and recrawl,
the fetch loop over the pool, and the batcher that sends detail URLs to workers."""

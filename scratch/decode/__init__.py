"""Decoding: a query block against a KV cache, split-KV partials, a paged cache."""

"""Benchmarks (``make bench``): each module measures one thing and writes its table to RESULTS.md."""

"""The recommender's pure core: histograms and strategies, numbers in and numbers out (numpy, scipy).

Nothing in this package imports a Kubernetes or HTTP client, a logger, or reads the clock.
"""

"""Test harness: the real local control plane and Prometheus that the tests and the demo run against.

``cluster`` starts etcd and the Kubernetes components, ``prometheus`` starts Debian's Prometheus and
backfills history, ``certs`` makes the PKI, ``process`` supervises the children. Run
``python -m tests.harness --help`` to start a cluster by hand.
"""

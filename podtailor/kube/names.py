"""Kubernetes object names as the API server validates them: DNS-1123 labels and subdomains.

Owns the one check each for a name that goes into a URL path or a file name (a namespace or Service name is a
label, a workload name a subdomain), following k8s.io/apimachinery/pkg/util/validation/validation.go
``IsDNS1123Label`` and ``IsDNS1123Subdomain``. Pure: no client.
"""

from __future__ import annotations

import re
from typing import TypeGuard

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII)
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII)
_SUBDOMAIN_MAX = 253


def is_dns_label(value: object) -> TypeGuard[str]:
    """An RFC 1123 label (what namespace and Service names are): lower-case, digits and ``-``, 1 to 63."""
    return isinstance(value, str) and _LABEL.fullmatch(value) is not None


def is_dns_subdomain(value: object) -> TypeGuard[str]:
    """An RFC 1123 subdomain (what most workload names are): labels joined by ``.``, at most 253 characters."""
    return isinstance(value, str) and len(value) <= _SUBDOMAIN_MAX and _SUBDOMAIN.fullmatch(value) is not None

"""Shared test builders and plain helpers: the inputs, objects and drivers several test modules use.

No tests live here, and no fixtures (those are in the nearest ``conftest.py``). Test modules import from
these modules, never from one another. Assertions in these modules are rewritten by pytest, as in a test
module, so a failing helper assertion still explains itself.
"""

import pkgutil

import pytest

pytest.register_assert_rewrite(*(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__)))

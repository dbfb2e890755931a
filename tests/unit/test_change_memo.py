"""The memoized per-container change (``container_change``) against the plain computation (``compute_change``).

The memo's key is what ``compute_change`` reads of the view (name, requests, limits, resizePolicy) plus the
target and the constraints; these properties generate the view's other fields too, so a key that left out
something the computation reads would show as a difference here.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podtailor.resize.changes import Constraints, compute_change, container_change
from podtailor.resize.types import ContainerTarget, ContainerView, LimitRangeView, ResizeRestart
from podtailor.resources import Resources
from podtailor.vpa import ControlledValues
from tests.builders.policy import GI, MI

RESOURCES = ("cpu", "memory")


def _opt(low: int, high: int) -> st.SearchStrategy[int | None]:
    return st.one_of(st.none(), st.integers(low, high))


@st.composite
def resources(draw: st.DrawFn) -> Resources:
    return Resources(cpu_millicores=draw(_opt(1, 8000)), memory_bytes=draw(_opt(MI, 16 * GI)))


@st.composite
def views(draw: st.DrawFn) -> ContainerView:
    policy = draw(st.dictionaries(st.sampled_from(RESOURCES), st.sampled_from(ResizeRestart)))
    return ContainerView(name=draw(st.sampled_from(["app", "side"])), requests=draw(resources()),
                         limits=draw(resources()), resize_policy=policy, sidecar=draw(st.booleans()),
                         init=draw(st.booleans()), restart_count=draw(st.integers(0, 5)),
                         actual=draw(st.one_of(st.none(), resources())))


@st.composite
def targets(draw: st.DrawFn) -> ContainerTarget:
    wanted = Resources(cpu_millicores=draw(st.integers(1, 8000)), memory_bytes=draw(_opt(MI, 16 * GI)))
    return ContainerTarget(name="app", target=wanted, lower_bound=draw(resources()), upper_bound=draw(resources()),
                           controlled_resources=frozenset(draw(st.sets(st.sampled_from(RESOURCES)))),
                           controlled_values=draw(st.sampled_from(ControlledValues)),
                           min_allowed=draw(resources()), max_allowed=draw(resources()), mode_off=draw(st.booleans()))


@st.composite
def constraints(draw: st.DrawFn) -> Constraints:
    ratio = st.one_of(st.none(), st.floats(1.0, 10.0))
    limit_range = draw(st.one_of(st.none(), st.builds(
        LimitRangeView, namespace=st.just("shop"), min=resources(), max=resources(),
        max_limit_request_ratio_cpu=ratio, max_limit_request_ratio_memory=ratio)))
    return Constraints(limit_range=limit_range, hpa_resources=frozenset(draw(st.sets(st.sampled_from(RESOURCES)))),
                       no_decrease=draw(st.booleans()), keep_limit_ratio=draw(st.booleans()))


@settings(max_examples=200, deadline=None)
@given(view=views(), target=targets(), cons=constraints())
def test_memoized_change_equals_the_plain_computation(view: ContainerView, target: ContainerTarget,
                                                      cons: Constraints) -> None:
    plain = compute_change(view, target, cons)
    assert container_change(view, target, cons) == plain  # a miss, or a hit left by an earlier example
    assert container_change(view, target, cons) == plain  # a hit


@settings(max_examples=100, deadline=None)
@given(view=views(), other=views(), target=targets(), cons=constraints())
def test_views_sharing_a_spec_get_the_same_change(view: ContainerView, other: ContainerView,
                                                  target: ContainerTarget, cons: Constraints) -> None:
    """Two replicas of one spec (same name, requests, limits, resizePolicy) whose other fields differ: the second
    is served from the first's entry, and must equal its own plain computation."""
    twin = ContainerView(name=view.name, requests=view.requests, limits=view.limits,
                         resize_policy=dict(reversed(list(view.resize_policy.items()))), sidecar=other.sidecar,
                         init=other.init, restart_count=other.restart_count, actual=other.actual)
    container_change(view, target, cons)
    assert container_change(twin, target, cons) == compute_change(twin, target, cons)

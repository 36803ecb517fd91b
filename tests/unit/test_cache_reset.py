"""Which reset endpoint the harness uses, and what it records when there is none."""

from __future__ import annotations

from moeperf.suites.serving.load.auth import RequestHeaders
from moeperf.suites.serving.preflight import Answer
from moeperf.suites.serving.workload.cache_reset import CacheResetter


class _Target:
    """Answers POSTs by path, and remembers what it was asked."""

    def __init__(self, statuses: dict[str, int]):
        self.statuses = statuses
        self.asked: list[str] = []

    def __call__(self, url: str, timeout_s: float, headers: RequestHeaders) -> Answer:
        path = url.removeprefix("http://t")
        self.asked.append(path)
        status = self.statuses.get(path, 404)
        return Answer(status, b"", None if status < 400 else f"HTTP {status} Not Found")


def test_sglang_flush_is_found_after_vllm_reset_and_remembered():
    target = _Target({"/flush_cache": 200})
    resetter = CacheResetter("http://t/", post=target)
    first, second = resetter.reset(), resetter.reset()
    assert first.done and second.done
    assert first.detail == "POST /flush_cache: HTTP 200"
    assert target.asked == ["/reset_prefix_cache", "/flush_cache", "/flush_cache"]


def test_a_target_without_a_reset_is_asked_once_and_says_not_available():
    target = _Target({})
    resetter = CacheResetter("http://t", post=target)
    first, second = resetter.reset(), resetter.reset()
    assert not first.done and first == second
    assert first.detail.startswith("not available from this target (POST /reset_prefix_cache")
    assert "/flush_cache: HTTP 404" in first.detail
    assert len(target.asked) == 2  # not asked again for the second level


def test_a_reset_that_worked_and_then_fails_is_that_levels_failure():
    target = _Target({"/reset_prefix_cache": 200})
    resetter = CacheResetter("http://t", post=target)
    assert resetter.reset().done
    target.statuses["/reset_prefix_cache"] = 503
    failed = resetter.reset()
    assert not failed.done and failed.detail.startswith("the reset failed")

"""Resetting the target's prefix cache between levels, so no level is served from another's.

Servers offer it under different names: vLLM ``POST /reset_prefix_cache`` (in recent
versions only with ``VLLM_SERVER_DEV_MODE=1``), SGLang ``POST /flush_cache``, and the
reference target the former. The first that answers 2xx is remembered and used for the
rest of the run; a target where none does is asked once, and every level then records
"not available from this target" with what each endpoint answered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from moeperf.suites.serving.load.auth import NO_HEADERS, RequestHeaders
from moeperf.suites.serving.preflight import Answer, http_post

# Tried in this order; the reference target answers the first.
RESET_ENDPOINTS = ("/reset_prefix_cache", "/flush_cache")
_TIMEOUT_S = 10.0

Post = Callable[[str, float, RequestHeaders], Answer]


@dataclass(frozen=True, slots=True)
class CacheReset:
    """One attempt to empty the target's prefix cache before a level."""

    done: bool
    # "POST /reset_prefix_cache: HTTP 200", or "not available from this target (...)".
    detail: str


class CacheResetter:
    """Empties the target's prefix cache before each level, where the target can."""

    def __init__(self, base_url: str, headers: RequestHeaders = NO_HEADERS, post: Post = http_post):
        self._base_url = base_url.rstrip("/")
        self._headers = headers
        self._post = post
        self._working: str | None = None  # the endpoint that answered 2xx
        self._unavailable: str | None = None  # why none did, once all were tried

    def reset(self) -> CacheReset:
        if self._unavailable is not None:
            return CacheReset(False, self._unavailable)
        endpoints = (self._working,) if self._working else RESET_ENDPOINTS
        answers = []
        for endpoint in endpoints:
            answer = self._post(self._base_url + endpoint, _TIMEOUT_S, self._headers)
            if answer.status is not None and 200 <= answer.status < 300:
                self._working = endpoint
                return CacheReset(True, f"POST {endpoint}: HTTP {answer.status}")
            answers.append(f"POST {endpoint}: {answer.problem or f'HTTP {answer.status}'}")
        why = "; ".join(answers)
        if self._working is not None:  # it worked before: a failure now is this level's
            return CacheReset(False, f"the reset failed ({why})")
        self._unavailable = f"not available from this target ({why})"
        return CacheReset(False, self._unavailable)

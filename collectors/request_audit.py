"""The request audit: every request a load worker sent is in the run's records exactly
once. Each worker numbers the requests it sends (0, 1, 2...) in their ids, across the
run's levels, and says how many it sent; the stored records are checked against that."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

# A request id as the load workers build it: [prefix]w<worker>-<number> (asyncio engine)
# or [prefix]L<worker>-<number> (Locust engine).
_REQUEST_ID = re.compile(r"[wL](\d+)-(\d+)$")
_SHOWN_IDS = 20  # ids listed per finding (the counts are whole)


@dataclass(frozen=True, slots=True)
class RequestAudit:
    """Every request a load worker sent is in the records exactly once.

    Each worker numbers its requests 0, 1, 2...; ``sent`` is the workers' own count of the
    requests they sent; ``missing``: numbers below a worker's count with no record (lost);
    ``unknown``: records whose number no worker sent; ``duplicated``: ids held by more
    than one record after amendments (counted twice). ``examples``: the first ids found
    of each kind ("missing worker 0 #17"), the counts are whole.
    """

    sent: int
    recorded: int
    missing: int
    unknown: int
    duplicated: int
    examples: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        return self.sent == self.recorded and not (self.missing or self.unknown or self.duplicated)


def audit_requests(request_ids: Iterable[object], sent_by_worker: dict[int, int]) -> RequestAudit:
    """Compare the stored request ids with what each worker says it sent (RequestAudit)."""
    ids = [str(i) for i in request_ids]
    duplicated = sorted(i for i, n in Counter(ids).items() if n > 1)
    seen: dict[int, set[int]] = {}
    unknown = []
    for request_id in set(ids):
        match = _REQUEST_ID.search(request_id)
        if match is None:
            unknown.append(request_id)
            continue
        worker, number = int(match[1]), int(match[2])
        if number >= sent_by_worker.get(worker, 0):
            unknown.append(request_id)
        else:
            seen.setdefault(worker, set()).add(number)
    missing = [
        f"worker {worker} #{n}"
        for worker, count in sorted(sent_by_worker.items())
        for n in range(count)
        if n not in seen.get(worker, set())
    ]
    examples = [f"missing {i}" for i in missing[:_SHOWN_IDS]]
    examples += [f"unknown {i}" for i in sorted(unknown)[:_SHOWN_IDS]]
    examples += [f"duplicated {i}" for i in duplicated[:_SHOWN_IDS]]
    return RequestAudit(
        sent=sum(sent_by_worker.values()),
        recorded=len(set(ids)),
        missing=len(missing),
        unknown=len(unknown),
        duplicated=len(duplicated),
        examples=tuple(examples),
    )


def audit_text(audit: RequestAudit) -> str:
    """The audit in one sentence, for notes, reasons and the terminal."""
    verdict = "exact" if audit.exact else "NOT EXACT"
    text = (
        f"request audit: {verdict}: {audit.sent} sent by the load workers, {audit.recorded} "
        f"recorded, {audit.missing} missing, {audit.unknown} unknown, {audit.duplicated} "
        "recorded twice"
    )
    if audit.examples:
        text += f" ({', '.join(audit.examples[:5])})"
    return text

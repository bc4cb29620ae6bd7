"""Audit facts from a store's rows: the few columns of each event the audit reads, turned into
``AuditFacts`` with equal strings shared, so a kept audit holds each once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from treadle.events.audit_facts import AuditFacts
from treadle.events.model import ROOT

LINK_KINDS = ("action", "observation", "agent_error", "user_rejection")
"""Kinds whose payload has link fields the audit reads (an action and the final results)."""


def audit_facts_from_rows(rows: Iterable[Sequence[Any]], start_seq: int) -> list[AuditFacts]:
    """``AuditFacts`` from rows of (seq, id, parent_seq, parent id when the parent is before
    ``start_seq``, kind, source, tool_call_id, tool_name, action_id, llm_response_id,
    has shared text, a condensation's forgotten ids as JSON text) in seq order from ``start_seq``: a parent inside the range is named by
    the id of its row (parent_seq is its position), a root by ``"__root__"``.

    Equal strings become one object (a parent's id and its children's parent_id, an action's
    call id and its result's, every "terminal"): a kept audit holds each once."""
    ids: list[str] = []
    facts: list[AuditFacts] = []
    one: dict[str, str] = {ROOT: ROOT}
    same = one.setdefault
    for row in rows:
        _, event_id, parent_seq, earlier, kind, source, call, name, action, response, text = row[
            :11
        ]
        forgotten = row[11]
        event_id = same(event_id, event_id)
        if parent_seq is None or parent_seq < 0:
            parent_id = ROOT
        elif parent_seq >= start_seq:
            parent_id = ids[parent_seq - start_seq]
        else:
            parent_id = same(earlier, earlier)
        ids.append(event_id)
        facts.append(
            AuditFacts(
                event_id,
                parent_id,
                same(kind, kind),
                same(source, source),
                same(call, call) if call else "",
                same(name, name) if name else "",
                same(action, action) if action else None,
                same(response, response) if response else None,
                bool(text),
                _forgotten_ids(forgotten) if forgotten else (),
            )
        )
    return facts


def _forgotten_ids(text: Any) -> tuple[str, ...]:
    """A condensation's ``forgotten_event_ids`` as the store's JSON function gave them."""
    ids = json.loads(text) if isinstance(text, str | bytes) else text
    return tuple(item for item in ids if isinstance(item, str)) if isinstance(ids, list) else ()

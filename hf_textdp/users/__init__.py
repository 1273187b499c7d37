"""Per-person accounting (docs/mechanisms/users.md): each user's total ε, a budget that bounds it, and one
pseudonym per sensitive string of a user or row (docs/mechanisms/selective.md §8).

The ``user=`` setting (:func:`parse_user`), the keys (:mod:`~hf_textdp.users.keys`), the sensitive strings of a
batch (:func:`find_entities`), the counting pass (:class:`UserCounter`), the allocation (levels, kept rows), the
table the release reads (:class:`UserTable`), each batch's plan (:class:`UserPlan`), and the report's ``users``
section (:mod:`~hf_textdp.users.report`).
"""

from __future__ import annotations

from .allocation import LEVELS_PER_OCTAVE, choose_levels, keep_prefix, level_scale
from .counting import BatchCounts, UserCounter, distinct_sensitive
from .entities import EntityRuns, find_entities
from .fit import count_batch, fit_counts, others_kept, per_person, spec_consistent, user_secret, user_values
from .keys import entity_digest, entity_keys, row_priorities, user_keys
from .levels import LevelEngines, scaled_config
from .plan import UserBatch, UserRelease, blank_dropped
from .report import UserTotals, add_user_section, user_section, user_totals_from_batches
from .spec import BOUNDS, USER_KEYS, UserSpec, check_user_setting, parse_user
from .table import UserTable, pair_keys


__all__ = [
    "BOUNDS",
    "LEVELS_PER_OCTAVE",
    "USER_KEYS",
    "BatchCounts",
    "EntityRuns",
    "LevelEngines",
    "UserBatch",
    "UserTotals",
    "add_user_section",
    "count_batch",
    "fit_counts",
    "others_kept",
    "per_person",
    "spec_consistent",
    "user_secret",
    "user_section",
    "user_totals_from_batches",
    "user_values",
    "UserRelease",
    "blank_dropped",
    "scaled_config",
    "UserCounter",
    "UserSpec",
    "UserTable",
    "check_user_setting",
    "choose_levels",
    "distinct_sensitive",
    "entity_digest",
    "entity_keys",
    "find_entities",
    "keep_prefix",
    "level_scale",
    "pair_keys",
    "parse_user",
    "row_priorities",
    "user_keys",
]

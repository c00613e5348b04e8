"""Bounded stores: a retention per table, the R-STORE-1 dedupe horizon, and the batch purger.

:class:`RetentionConfig` (fleet.toml ``[retention]``) says how long finished rows are kept;
:mod:`.rules` says which rows are finished (and which never are); :class:`Purger` deletes them in
small transactions from the gateway's maintenance loop and ``fleet store purge``;
:mod:`.stats` reads rows, oldest-row ages and the database size for ``fleet store stats``.
"""

from .policy import RetentionConfig

__all__ = ["RetentionConfig"]

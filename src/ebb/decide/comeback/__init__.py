"""The comeback bound: the risk that the need outgrows a fleet before removed capacity returns.

:mod:`~ebb.decide.comeback.bound` holds the bound (one record a second, floor and risk queries, and
its many-records-at-once twins beside ``record``); :mod:`~ebb.decide.comeback.floor_bounds` the
lower bounds of its floor ahead of the records (for blocks of proven holds);
:mod:`~ebb.decide.comeback.streams` the running maxima, sums and moments both share.
"""

from ebb.decide.comeback.bound import ComebackBound, ComebackEstimate, HistoryBound, RecordsAhead
from ebb.decide.comeback.floor_bounds import FloorAfter, floor_below

__all__ = ["ComebackBound", "ComebackEstimate", "FloorAfter", "HistoryBound", "RecordsAhead", "floor_below"]

"""The planning core (pure): ``estimate``'s scenario comparison and its plot, and SLO levels (``gen-config
--slo-itl``, tune's SLO candidates)."""

#: Upper bounds on scenario sizes: far beyond any deployment, low enough that a typo cannot make
#: the estimate run for minutes (tokens; decode batch). Here, not in :mod:`.estimate`, so that ``splits``
#: and the option checks bound their values without importing the cost model (start-up time).
MAX_TOKENS = 10_000_000
MAX_DECODE_BS = 1_000_000

"""The planning core (pure): ``estimate``'s scenario comparison and its plot, and SLO levels (``gen-config
--slo-itl``, tune's SLO candidates)."""

"""Infrastructure every layer uses: errors, atomic output files, signal handling, checked input files and
YAML, number parsing, matplotlib on the Agg canvas."""

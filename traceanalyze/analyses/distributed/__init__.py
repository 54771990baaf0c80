"""Many ranks: per-rank figures, stragglers, collective skew and bandwidth."""

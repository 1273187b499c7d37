"""Tools that measure a mechanism or this machine, not part of a release: the empirical privacy audit, the
epsilon calibration and the throughput bench."""

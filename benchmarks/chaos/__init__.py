"""`make chaos`: a fault campaign on real processes under load; every row must hold."""

"""`pdctl serve` itself: supervising, adopting, its database, its hardening."""

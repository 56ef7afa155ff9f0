"""The `pdctl serve` process itself: its log setup, its stack dumps when it stalls, and what
it says it leaves running when it stops."""

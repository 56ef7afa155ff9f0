"""`pdctl calibrate`: the timing model fitted to a saved bench, and its error report."""

"""`pdctl top`: a deployment's live frames in a terminal: feed, layout, histograms, screen."""

"""The dashboard's pages in a real browser against a real `pdctl serve`."""

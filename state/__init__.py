"""What pdctl remembers: the SQLite engine and tables, the store (revisions, events, bench
runs), the event hub and the downsampled history. Imports only domain/ and third parties."""

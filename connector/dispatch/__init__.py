"""The legs' I/O on the request path: attempts and retries, the relay of the decode's bytes, the
hold queue, each flight's measurements, canaries, and the encode/render tiers."""

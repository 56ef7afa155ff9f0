"""The attach API: by URL, by discovery, and steering what was attached."""

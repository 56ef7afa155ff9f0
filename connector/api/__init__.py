"""The proxy's surface beside generation: the admin API, read-only info routes, the OpenAPI
document."""

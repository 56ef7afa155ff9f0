"""The proxy's HTTP/1.1 stack, one per side: aiohttp's server reads the clients' requests
(`read_deadlines`: its head deadline; `client_stream`: a streamed answer's fast path), and the
proxy's own client carries the legs to the engines, parsing with httptools (`upstream`)."""

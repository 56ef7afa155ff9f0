"""The proxy's HTTP/1.1 stack: its client to the engines and how it reads their answers."""

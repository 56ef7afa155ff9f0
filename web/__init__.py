"""The control plane's HTTP surface: the FastAPI app (`create_app`), REST API, HTML pages and
websockets. What the app composes lives in services/; web/ talks to the controller through its
one door (`controller`).

Floors (tests/test_layers.py): settings, htmx, diff and other leaves < `errors` <
`security/` < `deps` < `views/`, `schemas` < `routes/`, `event_relay` < `pages/` < `app`, `cli`."""

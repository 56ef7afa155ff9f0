"""One module per resource, each with its own `router`; web/app.py includes them."""

"""One module per resource, each with its own `router`, grouped by what the operator does
(deployment/, watch/, advise/); web/app.py includes them."""

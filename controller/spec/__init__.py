"""A deployment as an operator describes it (pydantic), section by section, and the checks that need
the world."""

"""What a browser would post from a page's form: every named input, textarea and select."""

from __future__ import annotations

from html.parser import HTMLParser


class _Form(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.fields: dict[str, str] = {}
        self._textarea: str | None = None
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        name = a.get("name")
        if tag == "input" and name and a.get("type") not in ("submit", "checkbox"):
            self.fields[name] = a.get("value", "")
        elif tag == "input" and name and a.get("type") == "checkbox" and "checked" in a:
            self.fields[name] = "on"
        elif tag == "textarea" and name:
            self._textarea, self.fields[name] = name, ""
        elif tag == "select" and name:
            self._select = name
        elif (
            tag == "option"
            and self._select
            and ("selected" in a or self._select not in self.fields)
        ):
            self.fields[self._select] = a.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self._textarea = None
        elif tag == "select":
            self._select = None

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.fields[self._textarea] += data


def form_fields(page: str) -> dict[str, str]:
    parser = _Form()
    parser.feed(page)
    return parser.fields

"""The on-call terminal: the operator verbs (`pdctl ls`, `show`, `apply`, `switch`, ...) and
`pdctl top`, all clients of `pdctl serve`'s REST API and websockets. Nothing here reads the
database or starts a process: the terminal obeys the same API and rules as the browser.

Rooms: `verbs/` (one module per verb family, and the CLI that registers them), `top/`
(`pdctl top`: feed, layout, histograms, screen). Beside them, what both share: the API
client, the config, the exit codes, the tables and views."""

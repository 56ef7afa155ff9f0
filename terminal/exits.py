"""The exit codes of every operator verb, in one place (each verb's --help ends with them).

0 done; 1 the server refused or the action failed (4xx other than those below, 5xx, a switch
that failed, instances that did not come up or stop within --timeout); 2 a usage error (a bad
flag or argument, or a spec file that cannot be read or whose content the server refuses with
422); 3 the server cannot be reached or did not answer as pdctl serve (not JSON, or a bare
404/405: no such route); 4 no valid token, or the token may not do this (401/403: a
viewer asking to change something); 5 a conflict: the revision changed under you, a change is
in progress, or the deployment is not in a state that allows it (409: a refused switch);
130 interrupted (Ctrl-C)."""

from __future__ import annotations

OK = 0
FAILED = 1
USAGE = 2
UNREACHABLE = 3
NOT_ALLOWED = 4
CONFLICT = 5
INTERRUPTED = 130

FOR_STATUS = {401: NOT_ALLOWED, 403: NOT_ALLOWED, 409: CONFLICT}

EPILOG = (
    "Exit codes: 0 done, 1 failed, 2 usage (bad flag or file), 3 server unreachable, "
    "4 not allowed (no token or a viewer's: PDCTL_TOKEN), 5 conflict (409), 130 interrupted."
)


def for_status(status: int) -> int:
    return FOR_STATUS.get(status, FAILED)

"""The exit codes of every operator verb, in one place (the README's table is this one).

0 done; 1 the server refused or the action failed (4xx other than those below, 5xx, a switch
that failed); 2 a usage error (a bad flag or file, said before anything is sent); 3 the
server cannot be reached or did not answer as pdctl serve; 4 no valid token, or the token
may not do this (401/403); 5 a conflict: the revision changed under you, or the deployment is
not in a state that allows it (409)."""

from __future__ import annotations

OK = 0
FAILED = 1
USAGE = 2
UNREACHABLE = 3
NOT_ALLOWED = 4
CONFLICT = 5

FOR_STATUS = {401: NOT_ALLOWED, 403: NOT_ALLOWED, 409: CONFLICT}


def for_status(status: int) -> int:
    return FOR_STATUS.get(status, FAILED)

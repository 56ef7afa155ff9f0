"""/login and /logout: the browser keeps its token in an HttpOnly, SameSite=Strict cookie.

Wrong tokens count against the client's address (TokenBook.check): past the limit the page
answers 429 with Retry-After. A sign-in also sets a device cookie (web/security/device.py), so this
browser's owner is not shut out by someone else's guessing from the same address.
Cross-origin posts never get here (web/security/csrf.py): a login form on another site cannot sign a
browser in as someone else.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse

from web.deps import StoreDep
from web.security.auth import COOKIE, TokenBook, TooManyAttempts
from web.security.device import DEVICE_COOKIE, MAX_AGE_S

router = APIRouter(tags=["login"], include_in_schema=False)


def _page(
    request: Request,
    error: str | None = None,
    code: int = 200,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    return request.app.state.templates.TemplateResponse(
        request, "login.html", {"error": error}, status_code=code, headers=headers
    )


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> HTMLResponse:
    return _page(request)


@router.post("/login", response_model=None)
def login(
    request: Request, token: Annotated[str, Form(max_length=4096)], store: StoreDep
) -> HTMLResponse | RedirectResponse:
    book: TokenBook = request.app.state.tokens
    try:
        device = request.cookies.get(DEVICE_COOKIE)
        actor = book.check(token, client_address(request), device) if book.enabled else None
    except TooManyAttempts as exc:
        return _page(
            request,
            exc.message[:1].upper() + exc.message[1:] + ".",
            status.HTTP_429_TOO_MANY_REQUESTS,
            exc.headers(),
        )
    if book.enabled and actor is None:
        return _page(request, "Unknown token.", status.HTTP_401_UNAUTHORIZED)
    redirect = RedirectResponse("/", status_code=status.HTTP_303_SEE_OTHER)
    if actor is not None:
        redirect.set_cookie(
            COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        redirect.set_cookie(
            DEVICE_COOKIE,
            book.device_cookie(actor),
            max_age=MAX_AGE_S,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        store.record(actor.label, "auth.login", f"{actor.label} signed in")
    return redirect


@router.post("/logout")
def logout(request: Request, store: StoreDep) -> RedirectResponse:
    book: TokenBook = request.app.state.tokens
    actor = book.identify(request.cookies.get(COOKIE, "")) if book.enabled else None
    if actor is not None:
        store.record(actor.label, "auth.logout", f"{actor.label} signed out")
    redirect = RedirectResponse("/login", status_code=status.HTTP_303_SEE_OTHER)
    for name in (COOKIE, DEVICE_COOKIE):
        redirect.delete_cookie(name, path="/", httponly=True, samesite="strict")
    return redirect

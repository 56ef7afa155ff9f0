"""Who may ask and how: tokens and roles, device cookies, CSRF, the Host allowlist, body limits,
read deadlines, failed-login rate limits."""

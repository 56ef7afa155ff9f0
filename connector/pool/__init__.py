"""Who the proxy can route to: instance groups by mode, pair selection policies, runtime P/D
roles."""

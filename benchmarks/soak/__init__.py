"""`make soak`: a deployment under load for minutes; every process's RSS and fds must stay
bounded."""

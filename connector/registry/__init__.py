"""MoRIIO's ZMQ registry (PROTOCOL.md section 2): each message checked, whom to believe, the
heartbeat table, and what one registration does."""

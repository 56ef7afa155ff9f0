"""A clock a test moves by hand: call it for the time, set or add to `now`."""


class ManualClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

"""Startup pacing: nominal stage times scaled by SPECDOCTOR_SIM_SPEED, plus the injected slow and hung stages."""

from __future__ import annotations

import threading

from specdoctor.tools.simnode.profile import Inject, Stage


class Stopped(Exception):
    """A stop signal arrived while the launch was pausing."""


class Pacer:
    def __init__(self, speed: float, inject: Inject, stop: threading.Event) -> None:
        self.speed = speed
        self.inject = inject
        self.stop = stop

    def pause(self, nominal_s: float) -> None:
        """Spend `nominal_s` seconds of a speed-1.0 startup."""
        self.wait(nominal_s * self.speed)

    def wait(self, seconds: float) -> None:
        if self.stop.wait(max(0.0, seconds)):
            raise Stopped

    def enter(self, stage: Stage) -> None:
        """Called right after a stage's first line: apply `slow_stage`, and never return at `hang_at_stage`."""
        extra = self.inject.slow_stage.get(stage, 0.0)
        if extra:
            self.wait(extra)
        if self.inject.hang_at_stage == stage:
            self.stop.wait()
            raise Stopped

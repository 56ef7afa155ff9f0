"""Routes that advise and measure: the advisor, proposals, autopilot, plan, bench, calibration."""

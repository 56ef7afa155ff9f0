"""Measurements that must agree: bench, engines, proxy, TTFT parts, calibration."""

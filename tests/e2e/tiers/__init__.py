"""Tiers beyond prefill and decode: encoders and the render tier."""

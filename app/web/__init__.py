"""The fleet-health web surface: JSON views, Prometheus /metrics and a live HTML page.

What it reads is `app.core.fleet.view.FleetView` (no aiohttp there); `server.py` builds
the aiohttp app; `faust_mount.py` serves the same routes from a Faust worker's web server.
"""

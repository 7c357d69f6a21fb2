"""The fleet-health web surface: JSON views, Prometheus /metrics and a live HTML page.

`view.py` holds what a driver keeps (no aiohttp); `server.py` builds the aiohttp app;
`faust_mount.py` serves the same routes from a Faust worker's web server.
"""

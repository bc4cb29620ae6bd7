"""The Canvas: the web page served by ``treadle serve`` at ``/`` (plain HTML, CSS, JS modules).

Shipped as package data and read by ``treadle.server.routes_web``; nothing is built or fetched.
"""

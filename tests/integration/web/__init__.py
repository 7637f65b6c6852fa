"""The web console: its pages and actions over WSGI, served over HTTP, and in a real browser."""

"""Integration tests: servers, pools, other processes, frameworks, the CLI, a browser, the project."""

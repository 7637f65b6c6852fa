"""Conformance: the port suite every backend must pass, and the ports of the reference's own tests."""

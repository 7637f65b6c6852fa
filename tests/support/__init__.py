"""What the tests import or run but are not tests: servers, worker programs, backends, shared helpers."""

"""The ilmek command line, in-process and as a user runs it."""

"""Ports of the reference's own tests (TypeScript and .NET), each naming the case it ports."""

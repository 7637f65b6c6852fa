"""The project as shipped: the package's surface, distributions, README, benchmarks' smoke runs."""

//! Shared code of the examples and integration tests.

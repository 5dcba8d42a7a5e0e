//! Cross-crate tests for rebound live in `tests/tests/`; this library is intentionally empty.

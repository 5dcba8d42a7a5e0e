//! The study's integration tests, one binary (one link for all of them).

mod compare;
mod outage_lengths;

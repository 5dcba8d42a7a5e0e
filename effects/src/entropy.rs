//! Random numbers from the operating system, for the seeds and ids a process must not share
//! with another: a runner's jitter seed, a Redis budget owner's id.
//!
//! Through ring's `SystemRandom` (ring is in the build for rustls and the reasoning identity's
//! HMAC), so the library adds no random-number crate of its own: ring's `getrandom` is the
//! only one in `rebound-effects` without the `schema` feature (`tests/tests/layout.rs`).

use ring::rand::{SecureRandom, SystemRandom};

/// Eight random bytes from the operating system, or `None` when it refuses (no entropy
/// source in a sandbox); each caller has its own fallback.
pub(crate) fn os_u64() -> Option<u64> {
    let mut bytes = [0u8; 8];
    SystemRandom::new().fill(&mut bytes).ok()?;
    Some(u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::os_u64;

    #[test]
    fn os_random_numbers_differ_from_call_to_call() {
        let drawn: std::collections::BTreeSet<u64> = (0..8).filter_map(|_| os_u64()).collect();
        assert_eq!(drawn.len(), 8, "{drawn:?}");
    }
}

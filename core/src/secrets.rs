//! The embedder's secrets (API keys, tokens, passwords), named to the machine so that no text
//! it writes carries one.
//!
//! The classifier already masks words shaped like API keys (`sk-…`); a key of another shape,
//! echoed by a server in an error body or a request id, or quoted by a failing tool, is only
//! known to the embedder. Named in a [`Secrets`], the machine replaces each occurrence with
//! `***` in what it is told of failures ([`Secrets::redact_event`]), before it decides, shows
//! or records anything: failure messages, retry and fallback notices, the run's error, tool
//! error results and traces never hold it.

use crate::failure::ProviderFailure;
use crate::tool::{CallOutcome, HostFailure, ToolFailure};
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// What a secret is replaced with.
pub const REDACTED: &str = "***";

/// The shortest secret [`Secrets`] takes, in bytes: a shorter one would mask ordinary words.
pub const MIN_SECRET_BYTES: usize = 8;

/// How much of a secret's start, at least, is masked where a text was cut short (`…`) in
/// the middle of it.
const MIN_CUT_PREFIX_BYTES: usize = 4;

/// Secrets no text of the machine may carry. Cheap to clone (shared); never serialized, and
/// its `Debug` shows only how many there are.
///
/// ```
/// use rebound_core::{FailureKind, ProviderFailure, Secrets};
///
/// let secrets = Secrets::new(["gw-7f3a9c2e51"])?;
/// let echoed = ProviderFailure::new(FailureKind::AuthFailed, "invalid key gw-7f3a9c2e51");
/// assert_eq!(&*secrets.redact_failure(echoed).message, "invalid key ***");
/// assert_eq!(format!("{secrets:?}"), "Secrets(1 named)");
/// # Ok::<(), rebound_core::SecretError>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    /// Longest first, so that a secret holding another is masked whole.
    words: Arc<[Box<str>]>,
}

/// A secret [`Secrets`] cannot take. Its message never holds the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// Shorter than [`MIN_SECRET_BYTES`] once trimmed (an empty one included).
    #[error(
        "secret {index} is {len} bytes long; a secret must have at least {MIN_SECRET_BYTES} \
         (a shorter one would mask ordinary words)"
    )]
    TooShort {
        /// Its position among those given, from 0.
        index: usize,
        /// Its length in bytes, trimmed.
        len: usize,
    },
}

impl Secrets {
    /// No secrets: nothing is masked but what the classifier masks anyway.
    #[must_use]
    pub fn none() -> Self {
        Secrets::default()
    }

    /// `secrets`, each trimmed of surrounding whitespace (a key read from a file ends with a
    /// newline).
    ///
    /// # Errors
    ///
    /// [`SecretError::TooShort`] for one shorter than [`MIN_SECRET_BYTES`].
    pub fn new<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Result<Self, SecretError> {
        let mut words: Vec<Box<str>> = Vec::new();
        for (index, secret) in secrets.into_iter().enumerate() {
            let secret = secret.as_ref().trim();
            if secret.len() < MIN_SECRET_BYTES {
                return Err(SecretError::TooShort {
                    index,
                    len: secret.len(),
                });
            }
            words.push(secret.into());
        }
        Ok(Self::longest_first(words))
    }

    /// `words` without repeats, longest first.
    fn longest_first(mut words: Vec<Box<str>>) -> Self {
        words.sort_unstable();
        words.dedup();
        words.sort_by_key(|w| std::cmp::Reverse(w.len()));
        Secrets {
            words: words.into(),
        }
    }

    /// These secrets and `other`'s.
    #[must_use]
    pub fn and(&self, other: &Secrets) -> Secrets {
        if other.is_empty() {
            return self.clone();
        }
        if self.is_empty() {
            return other.clone();
        }
        Self::longest_first(
            self.words
                .iter()
                .chain(other.words.iter())
                .cloned()
                .collect(),
        )
    }

    /// Whether none is named.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// How many are named.
    #[must_use]
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// `text` with every secret replaced by [`REDACTED`]. A text cut short with `…` (as the
    /// classifier bounds messages) that stops inside a secret loses that secret's start too.
    #[must_use]
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for word in self.words.iter() {
            if out.contains(&**word) {
                out = Cow::Owned(out.replace(&**word, REDACTED));
            }
        }
        if let Some(head) = out.strip_suffix('…') {
            if let Some(cut) = self.cut_secret_at_end(head) {
                let kept = head.len() - cut;
                out = Cow::Owned(format!("{}{REDACTED}…", &head[..kept]));
            }
        }
        out
    }

    /// The length of the longest end of `text` that starts one of the secrets (at least
    /// [`MIN_CUT_PREFIX_BYTES`] long).
    fn cut_secret_at_end(&self, text: &str) -> Option<usize> {
        self.words
            .iter()
            .filter_map(|word| {
                (MIN_CUT_PREFIX_BYTES..word.len())
                    .rev()
                    .find(|&n| word.is_char_boundary(n) && text.ends_with(&word[..n]))
            })
            .max()
    }

    /// Redacts `text` in place; whether it changed.
    pub(crate) fn scrub(&self, text: &mut String) -> bool {
        match self.redact(text) {
            Cow::Borrowed(_) => false,
            Cow::Owned(clean) => {
                *text = clean;
                true
            }
        }
    }

    /// `failure` with its message, error type and request id redacted.
    #[must_use]
    pub fn redact_failure(&self, mut failure: ProviderFailure) -> ProviderFailure {
        if self.is_empty() {
            return failure;
        }
        if let Cow::Owned(clean) = self.redact(&failure.message) {
            failure.message = clean.into();
        }
        for text in [&mut failure.error_type, &mut failure.request_id]
            .into_iter()
            .flatten()
        {
            self.scrub(text);
        }
        failure
    }

    pub(crate) fn redact_host(&self, mut failure: HostFailure) -> HostFailure {
        self.scrub(&mut failure.message);
        failure
    }

    pub(crate) fn redact_tool(&self, failure: ToolFailure) -> ToolFailure {
        match failure {
            ToolFailure::Model { mut message } => {
                self.scrub(&mut message);
                ToolFailure::Model { message }
            }
            ToolFailure::Host(host) => ToolFailure::Host(self.redact_host(host)),
        }
    }

    /// `call` with its failure's message redacted (a tool's output is left as it is).
    #[must_use]
    pub fn redact_outcome(&self, mut call: CallOutcome) -> CallOutcome {
        call.result = call.result.map_err(|f| self.redact_tool(f));
        call
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({} named)", self.words.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureKind;

    fn secrets(words: &[&str]) -> Secrets {
        Secrets::new(words).expect("long enough")
    }

    #[test]
    fn every_occurrence_is_masked_and_the_rest_kept() {
        let s = secrets(&["AKIA1234567890"]);
        assert_eq!(
            s.redact("key AKIA1234567890 and AKIA1234567890."),
            "key *** and ***."
        );
        assert!(matches!(s.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_secret_holding_another_is_masked_whole() {
        let s = secrets(&["abcdefgh", "xxabcdefghyy"]);
        assert_eq!(s.redact("[xxabcdefghyy] [abcdefgh]"), "[***] [***]");
    }

    #[test]
    fn a_text_cut_inside_a_secret_loses_the_secrets_start() {
        let s = secrets(&["tok-0123456789abcdef"]);
        assert_eq!(s.redact("bad token tok-0123…"), "bad token ***…");
        // Fewer than four bytes of it, or no cut: left as it is.
        assert_eq!(s.redact("ends in tok…"), "ends in tok…");
        assert_eq!(s.redact("ends in tok-0123"), "ends in tok-0123");
    }

    #[test]
    fn secrets_joined_keep_each_once() {
        let joined = secrets(&["first-secret", "second-secret"]).and(&secrets(&["first-secret"]));
        assert_eq!(joined.len(), 2);
        assert_eq!(joined.redact("first-secret second-secret"), "*** ***");
        assert!(Secrets::none().and(&Secrets::none()).is_empty());
    }

    #[test]
    fn short_secrets_are_refused_without_being_shown() {
        let err = Secrets::new(["long-enough-1", " tiny5\n"]).expect_err("too short");
        assert_eq!(err, SecretError::TooShort { index: 1, len: 5 });
        assert!(!err.to_string().contains("tiny5"));
        assert_eq!(secrets(&[" padded-key\n"]).redact("padded-key"), "***");
    }

    #[test]
    fn failures_lose_the_secret_in_every_text() {
        let s = secrets(&["sess-5b1e2d7c"]);
        let mut f = ProviderFailure::new(FailureKind::AuthFailed, "key sess-5b1e2d7c is invalid");
        f.request_id = Some("req_sess-5b1e2d7c".into());
        f.error_type = Some("sess-5b1e2d7c".into());
        let clean = s.redact_failure(f);
        assert_eq!(&*clean.message, "key *** is invalid");
        assert_eq!(clean.request_id.as_deref(), Some("req_***"));
        assert_eq!(clean.error_type.as_deref(), Some("***"));
    }
}

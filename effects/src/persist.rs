//! Where a run's conversation is kept: the [`Persist`] interface the runner writes every change
//! through, and its implementation for the session file store.

use crate::provider::BoxFuture;
use crate::session::{SessionError, SessionStore};
use rebound_core::{Conversation, Message};

/// Where the conversation is persisted after every change (a session file, a database): each
/// change is handed over as it happens, so a store can append it. An error is a host failure:
/// the run stops.
pub trait Persist: Send + Sync {
    /// Records `message`, just appended to the conversation.
    fn append<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Result<(), PersistError>>;
    /// Records that the conversation was replaced by `conversation` (after a compaction).
    fn replace<'a>(
        &'a self,
        conversation: &'a Conversation,
    ) -> BoxFuture<'a, Result<(), PersistError>>;
}

/// Why a [`Persist`] store could not record a change. The run fails with a
/// [`HostFailure`](rebound_core::HostFailure) of kind `SessionStore` carrying this error's message, so the message must
/// hold no secret (no connection string with a password in it).
///
/// ```
/// use rebound_core::{Conversation, MachineConfig, Message};
/// use rebound_effects::provider::BoxFuture;
/// use rebound_effects::persist::{Persist, PersistError};
/// use rebound_effects::runner::Runner;
///
/// /// A store that is always full.
/// struct Full;
///
/// impl Persist for Full {
///     fn append<'a>(&'a self, _: &'a Message) -> BoxFuture<'a, Result<(), PersistError>> {
///         Box::pin(async {
///             Err(PersistError::other(std::io::Error::other("disk full")))
///         })
///     }
///     fn replace<'a>(&'a self, _: &'a Conversation) -> BoxFuture<'a, Result<(), PersistError>> {
///         Box::pin(async { Ok(()) })
///     }
/// }
///
/// // A run with this store fails at its first message.
/// let _runner = Runner::new(MachineConfig::default(), vec![]).persist(Full);
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PersistError {
    /// The session file store ([`SessionStore`]) failed; the
    /// error names the file and what to do.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// Any other store failed (a database, a remote service): its own error, whose message is
    /// this error's message.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl PersistError {
    /// Wraps a store's own error, or a message (`&str`, `String`), as
    /// [`PersistError::Other`].
    #[must_use]
    pub fn other(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        PersistError::Other(error.into())
    }
}

impl Persist for SessionStore {
    fn append<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Result<(), PersistError>> {
        Box::pin(async move { Ok(SessionStore::append(self, message).await?) })
    }

    fn replace<'a>(
        &'a self,
        conversation: &'a Conversation,
    ) -> BoxFuture<'a, Result<(), PersistError>> {
        Box::pin(async move { Ok(SessionStore::replace(self, conversation).await?) })
    }
}

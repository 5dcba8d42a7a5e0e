//! Session files: a conversation saved as JSON, atomically, after every message.
//!
//! The file is `{"version": 1, "messages": [...]}` with messages in core's serde shape (the
//! Anthropic Messages shape), so people can read it and other tools can load it:
//!
//! ```json
//! {
//!   "version": 1,
//!   "messages": [
//!     {"role": "user", "content": [{"type": "text", "text": "hello"}]}
//!   ]
//! }
//! ```
//!
//! Older forms load too: a file without `version` (`{"messages": [...]}` or a bare array of
//! messages), content given as a plain string, tool results without `is_error`. They are
//! written back in the current form on the next save. Unknown top-level fields are ignored.
//!
//! Saving is atomic: the new content goes to a temporary file in the same folder, which is
//! fsynced, renamed over the session file, and then the folder is fsynced. A crash at any
//! point leaves either the old or the new complete file (and at worst a stray
//! `.NAME.*.tmp` file beside it). A new session file (and every temporary file) is created
//! readable and writable by its owner only (0600, see [`private_file`](crate::private_file));
//! a session file that exists keeps its mode across saves. A file that cannot be loaded is
//! never written:
//! [`SessionStore::open`] refuses it, so there is no store to save with.
//!
//! ```
//! use rebound_core::{Conversation, Message};
//! use rebound_effects::session::SessionStore;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let path = std::env::temp_dir().join(format!("rebound-doc-{}.json", std::process::id()));
//! let (store, mut conversation) = SessionStore::open(&path).await?;
//! assert!(conversation.is_empty()); // no file yet
//! conversation.push(Message::user_text("hello"));
//! store.save(&conversation).await?;
//! let (_, resumed) = SessionStore::open(&path).await?;
//! assert_eq!(resumed, conversation);
//! # std::fs::remove_file(&path).ok();
//! # Ok::<(), rebound_effects::session::SessionError>(())
//! # }).unwrap();
//! ```
//!
//! Sessions hold only the conversation: no API keys, headers or configuration.

use rebound_core::{Conversation, Message};
use serde::Serialize;
use serde_json::Value;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The session format version this build writes and the newest it reads.
pub const SESSION_VERSION: u64 = 1;

/// What is wrong with the bytes of a session file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionFormatError {
    /// Not JSON at all (or cut off).
    #[error("not valid JSON at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
        /// What the parser said.
        message: String,
    },
    /// JSON, but neither an object with `messages` nor an array of messages.
    #[error("expected an object with a `messages` array (or an array of messages), found {found}")]
    Shape {
        /// What was found instead, e.g. "a string" or "an object without `messages`".
        found: String,
    },
    /// `version` is not a positive integer.
    #[error("`version` must be a positive integer, found {found}")]
    BadVersion {
        /// The value found (shortened).
        found: String,
    },
    /// Written by a newer rebound.
    #[error("version {found} is newer than this rebound supports ({supported})")]
    NewerVersion {
        /// The version in the file.
        found: u64,
        /// [`SESSION_VERSION`].
        supported: u64,
    },
    /// One message does not have the expected shape.
    #[error("message {index} (0-based) is malformed: {message}")]
    Message {
        /// Its position in `messages`.
        index: usize,
        /// What is wrong with it.
        message: String,
    },
}

/// Why a session could not be loaded or saved. Each variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The file exists but could not be read.
    #[error("cannot read session file `{path}`: {source}")]
    Read {
        /// The session file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The file is not a session this rebound understands. It was left untouched.
    #[error(
        "session file `{path}` is corrupt: {problem}; it was left untouched (repair or move it, \
         or use another session file)"
    )]
    Corrupt {
        /// The session file.
        path: PathBuf,
        /// What is wrong.
        problem: SessionFormatError,
    },
    /// The file was written by a newer rebound. It was left untouched.
    #[error(
        "session file `{path}` has version {found}, newer than this rebound supports \
         ({supported}): upgrade rebound to resume it"
    )]
    UnsupportedVersion {
        /// The session file.
        path: PathBuf,
        /// The version in the file.
        found: u64,
        /// [`SESSION_VERSION`].
        supported: u64,
    },
    /// The file was replaced, but its folder could not be fsynced: a crash now may bring
    /// back the previous version (never a torn one).
    #[error(
        "session file `{path}` was saved but its folder could not be synced to disk: {source}; \
         a crash now may bring back the previous version"
    )]
    SyncFolder {
        /// The session file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Saving failed; the previous content of the file (if any) is intact.
    #[error("cannot save session file `{path}`: {source}; its previous content was kept")]
    Write {
        /// The session file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

/// Parses the bytes of a session file, in any form this build reads.
///
/// ```
/// use rebound_effects::session::decode_session;
///
/// let old = br#"[{"role": "user", "content": "hi"}]"#;
/// assert_eq!(decode_session(old).unwrap().messages()[0].text(), "hi");
/// assert!(decode_session(br#"{"version": 2, "messages": []}"#).is_err());
/// ```
pub fn decode_session(bytes: &[u8]) -> Result<Conversation, SessionFormatError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| SessionFormatError::Json {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let items = match value {
        Value::Array(items) => items,
        Value::Object(mut fields) => {
            if let Some(version) = fields.remove("version") {
                match version.as_u64() {
                    Some(v) if v == SESSION_VERSION => {}
                    Some(found) if found > SESSION_VERSION => {
                        return Err(SessionFormatError::NewerVersion {
                            found,
                            supported: SESSION_VERSION,
                        })
                    }
                    _ => {
                        return Err(SessionFormatError::BadVersion {
                            found: crate::tools::bounded(&version.to_string(), 60),
                        })
                    }
                }
            }
            match fields.remove("messages") {
                Some(Value::Array(items)) => items,
                Some(other) => {
                    return Err(SessionFormatError::Shape {
                        found: format!("`messages` as {}", kind(&other)),
                    })
                }
                None => {
                    return Err(SessionFormatError::Shape {
                        found: "an object without `messages`".to_owned(),
                    })
                }
            }
        }
        other => {
            return Err(SessionFormatError::Shape {
                found: kind(&other).to_owned(),
            })
        }
    };
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            serde_json::from_value::<Message>(item).map_err(|e| SessionFormatError::Message {
                index,
                message: crate::tools::bounded(&e.to_string(), 300),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Conversation::from)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[derive(Serialize)]
struct SessionFile<'a> {
    version: u64,
    messages: &'a [Message],
}

/// The bytes of a session file holding `conversation`, in the current form (pretty JSON).
#[must_use]
pub fn encode_session(conversation: &Conversation) -> Vec<u8> {
    let file = SessionFile {
        version: SESSION_VERSION,
        messages: conversation.messages(),
    };
    // Serializing plain data (strings, JSON values, enums) into a Vec cannot fail.
    let mut bytes = serde_json::to_vec_pretty(&file)
        .unwrap_or_else(|e| panic!("invariant: a conversation always serializes ({e})"));
    bytes.push(b'\n');
    bytes
}

/// Reads the session at `path`; `Ok(None)` when there is no such file.
pub async fn load_session(path: &Path) -> Result<Option<Conversation>, SessionError> {
    let bytes = match tokio::fs::read(path).await {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SessionError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    decode_session(&bytes)
        .map(Some)
        .map_err(|problem| match problem {
            SessionFormatError::NewerVersion { found, supported } => {
                SessionError::UnsupportedVersion {
                    path: path.to_owned(),
                    found,
                    supported,
                }
            }
            problem => SessionError::Corrupt {
                path: path.to_owned(),
                problem,
            },
        })
}

/// A session file that a run saves its conversation to.
///
/// Made by [`SessionStore::open`], which loads what is there, so a store exists only for a
/// file that is absent or loads cleanly: a corrupt file is never overwritten. The runner calls
/// [`save`](SessionStore::save) after every appended message; each save rewrites the whole
/// file atomically. Saves through one store (or its clones) run one at a time, in the order
/// they reach the store, so overlapping saves never race each other's rename.
#[derive(Debug, Clone)]
pub struct SessionStore {
    path: PathBuf,
    saving: Arc<tokio::sync::Mutex<()>>,
}

impl SessionStore {
    /// Opens the session at `path`: its conversation when the file exists (to resume), an
    /// empty one when it does not. Fails, leaving the file untouched, when it cannot be read,
    /// is corrupt, or has a newer version.
    pub async fn open(path: impl Into<PathBuf>) -> Result<(Self, Conversation), SessionError> {
        let path = path.into();
        let conversation = load_session(&path).await?.unwrap_or_default();
        let store = SessionStore {
            path,
            saving: Arc::default(),
        };
        Ok((store, conversation))
    }

    /// The session file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file again (an empty conversation if it has been removed).
    pub async fn load(&self) -> Result<Conversation, SessionError> {
        Ok(load_session(&self.path).await?.unwrap_or_default())
    }

    /// Replaces the file's content with `conversation`, atomically (see the
    /// [module docs](self)). On error the previous content is intact.
    pub async fn save(&self, conversation: &Conversation) -> Result<(), SessionError> {
        let bytes = encode_session(conversation);
        let _turn = self.saving.lock().await;
        let path = self.path.clone();
        let result = tokio::task::spawn_blocking(move || write_atomically(&path, &bytes)).await;
        let path = self.path.clone();
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(SaveFailure::Replace(source))) => Err(SessionError::Write { path, source }),
            Ok(Err(SaveFailure::SyncFolder(source))) => {
                Err(SessionError::SyncFolder { path, source })
            }
            Err(join) => Err(SessionError::Write {
                path,
                source: io::Error::other(format!("the saving task failed: {join}")),
            }),
        }
    }
}

impl SessionStore {
    /// [`save`](SessionStore::save) without an async runtime: writes on the calling thread
    /// (one write, two fsyncs). Fails, without writing, when an async save through this store
    /// or a clone of it is in progress.
    pub fn save_blocking(&self, conversation: &Conversation) -> Result<(), SessionError> {
        let path = self.path.clone();
        let Ok(_turn) = self.saving.try_lock() else {
            return Err(SessionError::Write {
                path,
                source: io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "another save of this session is in progress",
                ),
            });
        };
        match write_atomically(&self.path, &encode_session(conversation)) {
            Ok(()) => Ok(()),
            Err(SaveFailure::Replace(source)) => Err(SessionError::Write { path, source }),
            Err(SaveFailure::SyncFolder(source)) => Err(SessionError::SyncFolder { path, source }),
        }
    }
}

/// The runner saves through this after every appended message and compaction; an error
/// fails the run with a `SessionStore` host failure.
impl crate::runner::Persist for SessionStore {
    fn save<'a>(
        &'a self,
        conversation: &'a Conversation,
    ) -> crate::provider::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            SessionStore::save(self, conversation)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// How an atomic write failed: before the rename (nothing changed) or after it.
enum SaveFailure {
    Replace(io::Error),
    SyncFolder(io::Error),
}

/// Writes `bytes` to `path` through a fsynced temporary file renamed over it.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), SaveFailure> {
    replace(path, bytes).map_err(SaveFailure::Replace)?;
    sync_dir(&folder_of(path)).map_err(SaveFailure::SyncFolder)
}

fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Writes a fsynced temporary file beside `path` and renames it over `path`.
fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the session path has no file name",
        )
    })?;
    let dir = folder_of(path);
    let permissions = std::fs::metadata(path).ok().map(|m| m.permissions());
    let (temp, mut file) = create_temp(&dir, &name.to_string_lossy())?;
    let result = (|| {
        #[cfg(test)]
        failpoint::check(path)?;
        file.write_all(bytes)?;
        if let Some(permissions) = permissions {
            file.set_permissions(permissions)?;
        }
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        // Otherwise a stray temp file would stay behind.
        let _ = std::fs::remove_file(&temp);
    }
    result
}

fn create_temp(dir: &Path, name: &str) -> io::Result<(PathBuf, std::fs::File)> {
    // A conversation is private: a new session file is readable by its owner only.
    let mut options = crate::private_file::options();
    options.create_new(true);
    loop {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        match options.open(&temp) {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    // Windows cannot open a folder as a file; the rename is made durable by the filesystem.
    Ok(())
}

/// A forced failure in the middle of a save, for tests only.
#[cfg(test)]
mod failpoint {
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    static FAIL: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    /// The next save to `path` fails after creating its temp file.
    pub(super) fn arm(path: &Path) {
        FAIL.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(path.to_owned());
    }

    pub(super) fn check(path: &Path) -> io::Result<()> {
        let mut armed = FAIL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match armed.iter().position(|p| p == path) {
            Some(at) => {
                armed.remove(at);
                Err(io::Error::other("forced failure (test)"))
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_save_failing_midway_keeps_the_old_file_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.json");
        let (store, mut conversation) = SessionStore::open(&path).await.expect("open");
        conversation.push(Message::user_text("first"));
        store.save(&conversation).await.expect("first save");
        let before = std::fs::read(&path).expect("read");

        conversation.push(Message::assistant_text("second"));
        failpoint::arm(&path);
        let err = store.save(&conversation).await.expect_err("forced failure");
        assert!(matches!(err, SessionError::Write { .. }), "{err}");
        assert!(err.to_string().contains("s.json"), "{err}");

        assert_eq!(std::fs::read(&path).expect("read"), before);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["s.json"]);
        store.save(&conversation).await.expect("next save works");
        assert_eq!(store.load().await.expect("load").len(), 2);
    }
}

//! Session files: append-only JSON Lines transcripts of a conversation.
//!
//! A session is a transcript: a header line, then one line per event of the conversation,
//! each a JSON object on its own line (messages in core's serde shape, the Anthropic Messages
//! shape), so people can read, grep and `tail -f` it and other tools can load it:
//!
//! ```text
//! {"format":"rebound-session","version":2,"created":"2026-11-30T09:12:44Z","origin":"rebound 0.1.0"}
//! {"type":"message","message":{"role":"user","content":[{"type":"text","text":"hello"}]}}
//! {"type":"message","message":{"role":"assistant","content":[{"type":"text","text":"Hi!"}]}}
//! {"type":"compaction","replaces":2,"messages":[{"role":"user","content":[…]}]}
//! ```
//!
//! Loading replays the lines: a `message` line appends its message, a `compaction` line
//! replaces the whole conversation with its `messages` (`replaces` says how many messages it
//! stood for). The history before a compaction stays in the file. Unknown fields are ignored.
//!
//! # Appends and crashes
//!
//! Appending writes one line and fsyncs once: its cost is the size of the message, whatever
//! the length of the session. A crash (or `kill -9`) in the middle of an append leaves at
//! worst a torn last line: a last line that is not valid JSON (cut off, or the zeros a
//! filesystem may leave after a power loss) is ignored by loading, and the next append cuts
//! it off before writing. A last line that is complete but lacks its newline is kept, and the
//! next append writes the newline first. Every other line must be valid: a bad line in the
//! middle is a [`SessionFormatError::Line`] naming it, and the file is left untouched.
//!
//! The file is created (header and first line) through a fsynced temporary file renamed into
//! place, so it never exists without its header. It is created readable and writable by its
//! owner only (0600, see [`private_file`](crate::private_file)); an existing file keeps its
//! mode.
//!
//! # Older files
//!
//! The whole-file form of earlier versions, `{"version": 1, "messages": [...]}`, loads, and so
//! do the forms before it: a file without `version` (`{"messages": [...]}` or a bare array of
//! messages), content given as a plain string, tool results without `is_error`. The first
//! write through a [`SessionStore`] converts such a file into a transcript, keeping the old
//! file beside it as `NAME.v1.bak` (a hard link made before the transcript is renamed over
//! it, so no crash loses it).
//!
//! # One writer
//!
//! [`SessionStore::open`] takes an exclusive lock on `NAME.lock` beside the session (an OS
//! advisory lock, released when the store is dropped or its process dies, even by `kill -9`).
//! A second store for the same file, in this process or another, gets
//! [`SessionError::Locked`] instead of interleaving its lines. (On platforms other than Unix
//! there is no lock.) Reading with [`load_session`] takes no lock.
//!
//! The lock is `flock(2)`. On a network filesystem it protects less: on Linux NFS it becomes
//! a lock on the whole file held by the process (other clients honour it only if their
//! kernels and the server agree), it does nothing with the `nolock` mount option, and SMB,
//! FUSE and other network filesystems vary. [`SessionStore::network_filesystem`] says when the
//! session is on one (the `rebound` binary prints a warning); keep sessions on a local disk
//! when two runs might use the same file.
//!
//! ```
//! use rebound_core::Message;
//! use rebound_effects::session::SessionStore;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let dir = std::env::temp_dir().join(format!("rebound-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("session.jsonl");
//! let (store, conversation) = SessionStore::open(&path).await?;
//! assert!(conversation.is_empty()); // no file yet
//! store.append(&Message::user_text("hello")).await?;
//! store.append(&Message::assistant_text("Hi!")).await?;
//! drop(store); // releases the lock
//! let (_, resumed) = SessionStore::open(&path).await?;
//! assert_eq!(resumed.messages()[1].text(), "Hi!");
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), rebound_effects::session::SessionError>(())
//! # }).unwrap();
//! ```
//!
//! Sessions hold only the conversation: no API keys, headers or configuration.

use rebound_core::{Conversation, Message};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The session format version this build writes (the transcript) and the newest it reads.
/// Version 1 was the whole-file form, which still loads.
pub const SESSION_VERSION: u64 = 2;

/// The `format` of a transcript's header line.
pub const SESSION_FORMAT: &str = "rebound-session";

/// The largest session file that is loaded; a larger one is [`SessionError::TooLarge`].
pub const MAX_SESSION_BYTES: u64 = 1 << 30;

/// What is wrong with the bytes of a session file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    /// JSON, but neither a transcript nor an object with `messages` nor an array of messages.
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
    /// One message of a whole-file session does not have the expected shape.
    #[error("message {index} (0-based) is malformed: {message}")]
    Message {
        /// Its position in `messages`.
        index: usize,
        /// What is wrong with it.
        message: String,
    },
    /// A line of a transcript (the header, or a line before the last) is malformed.
    #[error("line {line} is malformed: {message}")]
    Line {
        /// 1-based line number (the header is line 1).
        line: usize,
        /// What is wrong with it.
        message: String,
    },
}

/// Why a session could not be loaded or saved. Each variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The file exists but could not be read.
    #[error("cannot read session file `{path}`: {source}")]
    Read {
        /// The session file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The file is larger than [`MAX_SESSION_BYTES`]. It was left untouched.
    #[error(
        "session file `{path}` is {size} bytes, more than the {limit} this rebound loads; it was \
         left untouched (start a new session file)"
    )]
    TooLarge {
        /// The session file.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
        /// [`MAX_SESSION_BYTES`].
        limit: u64,
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
    /// Another store (in this process or another) has the session open.
    #[error(
        "session file `{path}` is in use by another rebound run (it holds `{lock}`); wait for \
         that run to end, or use another session file"
    )]
    Locked {
        /// The session file.
        path: PathBuf,
        /// The lock file beside it.
        lock: PathBuf,
    },
    /// The lock file beside the session could not be created or locked.
    #[error("cannot lock session file `{path}` through `{lock}`: {source}")]
    Lock {
        /// The session file.
        path: PathBuf,
        /// The lock file beside it.
        lock: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The file was created or converted, but its folder could not be fsynced: a crash now
    /// may bring back the previous state (never a torn file).
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
    /// Saving would take the file past [`MAX_SESSION_BYTES`], which no rebound could load
    /// again. Nothing was written; every line saved before is intact.
    #[error(
        "session file `{path}` would grow to {size} bytes, more than the {limit} a session may \
         hold; nothing was written (start a new session file to go on)"
    )]
    Full {
        /// The session file.
        path: PathBuf,
        /// Its size had the change been written.
        size: u64,
        /// [`MAX_SESSION_BYTES`].
        limit: u64,
    },
    /// The change could not be read back as written (JSON nested deeper than a session line
    /// may be), so it was not written: every line saved before is intact.
    #[error(
        "cannot save session file `{path}`: the new line would not load again ({reason}); \
         nothing was written"
    )]
    Unloadable {
        /// The session file.
        path: PathBuf,
        /// Why the line would not load.
        reason: String,
    },
    /// Saving failed; every line saved before is intact.
    #[error("cannot save session file `{path}`: {source}; its previous content was kept")]
    Write {
        /// The session file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

/// The first line of a transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHeader {
    /// Always [`SESSION_FORMAT`].
    pub format: String,
    /// [`SESSION_VERSION`] when written by this build.
    pub version: u64,
    /// When the transcript was created, RFC 3339 in UTC (`2026-11-30T09:12:44Z`).
    #[serde(default)]
    pub created: String,
    /// The program that created it, e.g. `rebound 0.1.0`.
    #[serde(default)]
    pub origin: String,
    /// The file name of the whole-file session this transcript was converted from, kept as
    /// a backup beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub converted_from: Option<String>,
}

impl SessionHeader {
    /// A header for a transcript created now by this build.
    #[must_use]
    pub fn now() -> Self {
        SessionHeader {
            format: SESSION_FORMAT.to_owned(),
            version: SESSION_VERSION,
            created: rfc3339_now(),
            origin: concat!("rebound ", env!("CARGO_PKG_VERSION")).to_owned(),
            converted_from: None,
        }
    }
}

/// Which form a loaded session file has.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionForm {
    /// A JSON Lines transcript with this header.
    Transcript(SessionHeader),
    /// The whole-file form of version 1 and before; converted on the next write.
    Whole,
}

/// A session file, decoded by [`decode_session_file`].
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedSession {
    /// The conversation the lines replay to.
    pub conversation: Conversation,
    /// The file's form.
    pub form: SessionForm,
    /// How many of the bytes hold complete lines: the next append writes at this offset,
    /// cutting off whatever follows (a torn last line). When the bytes up to here do not end
    /// with a newline (a complete last line that lost it), the append writes one first.
    /// The whole length for the whole-file form.
    pub complete_len: usize,
}

/// Parses the bytes of a session file, in any form this build reads, to its conversation.
///
/// ```
/// use rebound_effects::session::decode_session;
///
/// let old = br#"[{"role": "user", "content": "hi"}]"#;
/// assert_eq!(decode_session(old).unwrap().messages()[0].text(), "hi");
/// let transcript = concat!(
///     r#"{"format":"rebound-session","version":2}"#, "\n",
///     r#"{"type":"message","message":{"role":"user","content":"hi"}}"#, "\n",
///     r#"{"type":"message","mess"#, // torn by a crash: ignored
/// );
/// assert_eq!(decode_session(transcript.as_bytes()).unwrap().len(), 1);
/// assert!(decode_session(br#"{"version": 3, "messages": []}"#).is_err());
/// ```
pub fn decode_session(bytes: &[u8]) -> Result<Conversation, SessionFormatError> {
    decode_session_file(bytes).map(|d| d.conversation)
}

/// Parses the bytes of a session file, in any form this build reads: the conversation, the
/// form, and where the next line goes. Pure: no I/O.
pub fn decode_session_file(bytes: &[u8]) -> Result<DecodedSession, SessionFormatError> {
    match transcript_header(bytes)? {
        Some((header, end)) => decode_transcript(bytes, header, end),
        None => Ok(DecodedSession {
            conversation: decode_whole(bytes)?,
            form: SessionForm::Whole,
            complete_len: bytes.len(),
        }),
    }
}

/// The header of a transcript and the offset after its line, or `None` when the first line
/// is not a transcript header (so the file is in the whole-file form).
fn transcript_header(bytes: &[u8]) -> Result<Option<(SessionHeader, usize)>, SessionFormatError> {
    let end = bytes
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bytes.len(), |at| at + 1);
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&bytes[..end]) else {
        return Ok(None);
    };
    let Some(format) = fields.get("format") else {
        return Ok(None);
    };
    let header_error = |message: String| SessionFormatError::Line { line: 1, message };
    if format != SESSION_FORMAT {
        return Err(header_error(format!(
            "`format` must be \"{SESSION_FORMAT}\", found {}",
            rebound_core::tool::bounded(&format.to_string(), 60)
        )));
    }
    check_version(
        fields.get("version").unwrap_or(&Value::Null),
        SESSION_VERSION,
    )?;
    let header = serde_json::from_value::<SessionHeader>(Value::Object(fields))
        .map_err(|e| header_error(rebound_core::tool::bounded(&e.to_string(), 300)))?;
    Ok(Some((header, end)))
}

fn decode_transcript(
    bytes: &[u8],
    header: SessionHeader,
    header_end: usize,
) -> Result<DecodedSession, SessionFormatError> {
    let mut messages: Vec<Message> = Vec::new();
    let mut complete_len = header_end;
    let mut at = header_end;
    let mut line_number = 1;
    while at < bytes.len() {
        line_number += 1;
        let end = bytes[at..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |n| at + n + 1);
        let line = &bytes[at..end];
        at = end;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let value = match serde_json::from_slice::<Value>(line) {
            Ok(value) => value,
            // The last line, torn by a crash: ignored, and cut off by the next append. A whole
            // line nested deeper than the parser reads (as an older rebound could write) is
            // not torn, and is never cut off: the session is refused instead.
            Err(_)
                if bytes[end..].iter().all(u8::is_ascii_whitespace)
                    && !whole_and_too_deep(line) =>
            {
                break
            }
            Err(e) => {
                return Err(SessionFormatError::Line {
                    line: line_number,
                    message: format!(
                        "not valid JSON: {}",
                        rebound_core::tool::bounded(&e.to_string(), 300)
                    ),
                })
            }
        };
        apply_entry(&mut messages, value).map_err(|message| SessionFormatError::Line {
            line: line_number,
            message,
        })?;
        complete_len = end;
    }
    Ok(DecodedSession {
        conversation: Conversation::from(messages),
        form: SessionForm::Transcript(header),
        complete_len,
    })
}

/// Replays one transcript line onto `messages`; the error says what is wrong with the line.
fn apply_entry(messages: &mut Vec<Message>, value: Value) -> Result<(), String> {
    let Value::Object(mut fields) = value else {
        return Err(format!("expected an object, found {}", kind(&value)));
    };
    let message_of = |value: Value| {
        serde_json::from_value::<Message>(value)
            .map_err(|e| rebound_core::tool::bounded(&e.to_string(), 300))
    };
    match fields.get("type").and_then(Value::as_str) {
        Some("message") => {
            let message = fields
                .remove("message")
                .ok_or("a `message` line without `message`")?;
            messages.push(message_of(message).map_err(|e| format!("bad message: {e}"))?);
        }
        Some("compaction") => {
            let Some(Value::Array(items)) = fields.remove("messages") else {
                return Err("a `compaction` line without a `messages` array".to_owned());
            };
            let replacement = items
                .into_iter()
                .enumerate()
                .map(|(i, item)| {
                    message_of(item).map_err(|e| format!("bad message {i} (0-based): {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            *messages = replacement;
        }
        Some(other) => {
            return Err(format!(
                "unknown line type `{}`",
                rebound_core::tool::bounded(other, 60)
            ))
        }
        None => return Err("a line without a `type` string".to_owned()),
    }
    Ok(())
}

/// The whole-file form: `{"version": 1, "messages": [...]}` and the older forms.
fn decode_whole(bytes: &[u8]) -> Result<Conversation, SessionFormatError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| SessionFormatError::Json {
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let items = match value {
        Value::Array(items) => items,
        Value::Object(mut fields) => {
            if let Some(version) = fields.remove("version") {
                check_version(&version, 1)?;
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
                message: rebound_core::tool::bounded(&e.to_string(), 300),
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
#[serde(tag = "type", rename_all = "snake_case")]
enum Entry<'a> {
    Message {
        message: &'a Message,
    },
    Compaction {
        replaces: usize,
        messages: &'a [Arc<Message>],
    },
}

fn line_of(value: &impl Serialize) -> Vec<u8> {
    // Serializing plain data (strings, JSON values, enums) into a Vec cannot fail.
    let mut bytes = serde_json::to_vec(value)
        .unwrap_or_else(|e| panic!("invariant: session lines always serialize ({e})"));
    bytes.push(b'\n');
    bytes
}

/// The deepest a session line may nest objects and arrays: serde_json, which reads every
/// line back, refuses the 128th level.
const MAX_LINE_DEPTH: usize = 127;

/// How deep `json` nests objects and arrays (brackets inside strings do not count).
fn nesting_depth(json: &[u8]) -> usize {
    nesting(json).0
}

/// Whether `line` closes every bracket it opens and nests deeper than the loader reads: a
/// complete line the parser refuses for its depth, not one a crash cut short.
fn whole_and_too_deep(line: &[u8]) -> bool {
    let (deepest, open) = nesting(line);
    deepest > MAX_LINE_DEPTH && open == 0
}

/// The deepest nesting of objects and arrays in `json`, and how many are still open at its
/// end (brackets inside strings do not count).
fn nesting(json: &[u8]) -> (usize, usize) {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    (deepest, depth)
}

/// The transcript line recording `message` appended (with its newline).
#[must_use]
pub fn message_line(message: &Message) -> Vec<u8> {
    line_of(&Entry::Message { message })
}

/// The transcript line recording that the conversation (of `replaces` messages) was replaced
/// by `conversation`, as a compaction does (with its newline).
#[must_use]
pub fn compaction_line(replaces: usize, conversation: &Conversation) -> Vec<u8> {
    line_of(&Entry::Compaction {
        replaces,
        messages: conversation.messages(),
    })
}

/// The bytes of a transcript holding `conversation`: `header`, then one line per message.
#[must_use]
pub fn encode_session(header: &SessionHeader, conversation: &Conversation) -> Vec<u8> {
    let mut bytes = line_of(header);
    for message in conversation.messages() {
        bytes.extend_from_slice(&message_line(message));
    }
    bytes
}

/// Reads the session at `path`; `Ok(None)` when there is no such file. Takes no lock: a
/// torn last line being appended is ignored like any other.
pub async fn load_session(path: &Path) -> Result<Option<Conversation>, SessionError> {
    let owned = path.to_owned();
    tokio::task::spawn_blocking(move || read_decoded(&owned))
        .await
        .unwrap_or_else(|join| {
            Err(SessionError::Read {
                path: path.to_owned(),
                source: io::Error::other(format!("the loading task failed: {join}")),
            })
        })
        .map(|found| found.map(|on_disk| on_disk.decoded.conversation))
}

/// A session file as read: decoded, with what the writer needs to know of its bytes.
struct OnDisk {
    decoded: DecodedSession,
    /// The file's length.
    len: u64,
    /// The complete lines do not end with a newline.
    needs_newline: bool,
}

/// Reads and decodes `path`; `Ok(None)` when it does not exist.
fn read_decoded(path: &Path) -> Result<Option<OnDisk>, SessionError> {
    let read_error = |source| SessionError::Read {
        path: path.to_owned(),
        source,
    };
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(read_error(source)),
    };
    let size = file.metadata().map_err(read_error)?.len();
    if size > MAX_SESSION_BYTES {
        return Err(SessionError::TooLarge {
            path: path.to_owned(),
            size,
            limit: MAX_SESSION_BYTES,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(MAX_SESSION_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_SESSION_BYTES {
        return Err(SessionError::TooLarge {
            path: path.to_owned(),
            size: bytes.len() as u64,
            limit: MAX_SESSION_BYTES,
        });
    }
    decode_session_file(&bytes)
        .map(|decoded| {
            let needs_newline = decoded.complete_len > 0
                && bytes[decoded.complete_len - 1] != b'\n'
                && matches!(decoded.form, SessionForm::Transcript(_));
            Some(OnDisk {
                decoded,
                len: bytes.len() as u64,
                needs_newline,
            })
        })
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

/// A session file that a run records its conversation in.
///
/// Made by [`SessionStore::open`], which locks the session and loads what is there, so a
/// store exists only for a file that is absent or loads cleanly: a corrupt file is never
/// written to. The runner calls [`append`](SessionStore::append) after every appended
/// message and [`replace`](SessionStore::replace) after a compaction; each writes one line.
/// Writes through one store (or its clones) run one at a time, in the order they reach the
/// store. The lock is released when the store and all its clones are dropped.
#[derive(Debug, Clone)]
pub struct SessionStore {
    path: PathBuf,
    writer: Arc<tokio::sync::Mutex<Writer>>,
    network_filesystem: Option<&'static str>,
}

impl SessionStore {
    /// Locks the session at `path` and opens it: its conversation when the file exists (to
    /// resume), an empty one when it does not (the file is created by the first write).
    /// Fails, leaving the file untouched, when another store has it open
    /// ([`SessionError::Locked`]), or it cannot be read, is corrupt, too large, or has a newer
    /// version.
    pub async fn open(path: impl Into<PathBuf>) -> Result<(Self, Conversation), SessionError> {
        let path: PathBuf = path.into();
        let opened = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || {
                let lock = SessionLock::acquire(&path)?;
                let network = network_filesystem(&folder_of(&path));
                read_decoded(&path).map(|decoded| (lock, decoded, network))
            })
            .await
        };
        let (lock, decoded, network_filesystem) = opened.map_err(|join| SessionError::Read {
            path: path.clone(),
            source: io::Error::other(format!("the opening task failed: {join}")),
        })??;
        let (state, conversation) = match decoded {
            None => (State::Missing, Conversation::default()),
            Some(OnDisk {
                decoded:
                    DecodedSession {
                        conversation,
                        form: SessionForm::Whole,
                        ..
                    },
                ..
            }) => (State::Whole(conversation.clone()), conversation),
            Some(OnDisk {
                decoded:
                    DecodedSession {
                        conversation,
                        form: SessionForm::Transcript(_),
                        complete_len,
                    },
                len,
                needs_newline,
            }) => {
                let state = State::Transcript {
                    file: None,
                    len: complete_len as u64,
                    needs_newline,
                    // Bytes past the complete lines: a torn line to cut off.
                    torn: len > complete_len as u64,
                };
                (state, conversation)
            }
        };
        let writer = Writer {
            path: path.clone(),
            state,
            messages: conversation.len(),
            _lock: lock,
        };
        let store = SessionStore {
            path,
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            network_filesystem,
        };
        Ok((store, conversation))
    }

    /// The kind of network filesystem the session is on (`"nfs"`, `"smb"`, `"fuse"`, …), or
    /// `None` on a local one (or where it cannot be told). On a network filesystem the
    /// session's lock may not keep a second run out: see the module documentation.
    #[must_use]
    pub fn network_filesystem(&self) -> Option<&'static str> {
        self.network_filesystem
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

    /// Records `message`, appended to the conversation: one line, one fsync. On error every
    /// line written before is intact (a partly written line is cut off by the next write).
    pub async fn append(&self, message: &Message) -> Result<(), SessionError> {
        let line = message_line(message);
        let writer = Arc::clone(&self.writer).lock_owned().await;
        self.write(writer, Change::Append(line)).await
    }

    /// Records that the conversation was replaced by `conversation` (a compaction): one
    /// compaction line holding it, one fsync. The lines before stay in the file.
    pub async fn replace(&self, conversation: &Conversation) -> Result<(), SessionError> {
        let writer = Arc::clone(&self.writer).lock_owned().await;
        let line = compaction_line(writer.messages, conversation);
        self.write(writer, Change::Replace(line, conversation.len()))
            .await
    }

    async fn write(
        &self,
        mut writer: tokio::sync::OwnedMutexGuard<Writer>,
        change: Change,
    ) -> Result<(), SessionError> {
        let result = tokio::task::spawn_blocking(move || {
            let (line, messages) = match change {
                Change::Append(line) => (line, writer.messages + 1),
                Change::Replace(line, messages) => (line, messages),
            };
            let result = writer.write_line(&line);
            if matches!(result, Ok(()) | Err(SessionError::SyncFolder { .. })) {
                writer.messages = messages;
            }
            result
        })
        .await;
        result.unwrap_or_else(|join| {
            Err(SessionError::Write {
                path: self.path.clone(),
                source: io::Error::other(format!("the saving task failed: {join}")),
            })
        })
    }
}

enum Change {
    Append(Vec<u8>),
    Replace(Vec<u8>, usize),
}

/// The writing side of a store, behind its mutex.
#[derive(Debug)]
struct Writer {
    path: PathBuf,
    state: State,
    /// How many messages the conversation has after the lines written so far.
    messages: usize,
    _lock: SessionLock,
}

#[derive(Debug)]
enum State {
    /// No file yet: the first write creates it, header included.
    Missing,
    /// A whole-file session holding this conversation: the first write converts it.
    Whole(Conversation),
    /// A transcript: lines are appended.
    Transcript {
        /// Opened for appending at the first append.
        file: Option<File>,
        /// Bytes of complete lines.
        len: u64,
        /// The complete lines do not end with a newline.
        needs_newline: bool,
        /// The file may hold bytes past `len` (a torn line, a failed write): cut them off.
        torn: bool,
    },
}

impl Writer {
    fn write_line(&mut self, line: &[u8]) -> Result<(), SessionError> {
        // Whatever is written must load: the loader reads each line with serde_json, which
        // refuses JSON nested deeper than its limit.
        let depth = nesting_depth(line);
        if depth > MAX_LINE_DEPTH {
            return Err(SessionError::Unloadable {
                path: self.path.clone(),
                reason: format!(
                    "it nests {depth} levels of objects and arrays, more than the \
                     {MAX_LINE_DEPTH} a session line may"
                ),
            });
        }
        if let State::Transcript {
            len, needs_newline, ..
        } = &self.state
        {
            let size = len
                .saturating_add(u64::from(*needs_newline))
                .saturating_add(line.len() as u64);
            self.check_size(size)?;
        }
        let path = self.path.clone();
        let write_error = |source| SessionError::Write {
            path: path.clone(),
            source,
        };
        match &mut self.state {
            State::Transcript {
                file,
                len,
                needs_newline,
                torn,
            } => {
                let file = match file {
                    Some(file) => file,
                    None => file.insert(
                        crate::private_file::options()
                            .append(true)
                            .open(&path)
                            .map_err(write_error)?,
                    ),
                };
                let mut bytes = Vec::with_capacity(line.len() + 1);
                if *needs_newline {
                    bytes.push(b'\n');
                }
                bytes.extend_from_slice(line);
                let result = (|| {
                    if *torn {
                        // Appends go to the end: first cut off what follows the complete lines.
                        file.set_len(*len)?;
                        *torn = false;
                    }
                    #[cfg(test)]
                    failpoint::check(&path)?;
                    file.write_all(&bytes)?;
                    file.sync_data()
                })();
                match result {
                    Ok(()) => {
                        *len += bytes.len() as u64;
                        *needs_newline = false;
                        Ok(())
                    }
                    Err(e) => {
                        // Part of the line may be in the file: the next write cuts it off.
                        *torn = true;
                        Err(write_error(e))
                    }
                }
            }
            State::Missing => {
                let mut bytes = line_of(&SessionHeader::now());
                bytes.extend_from_slice(line);
                self.create(bytes)
            }
            State::Whole(conversation) => {
                let conversation = std::mem::take(conversation);
                let result = self.convert(&conversation, line);
                if matches!(result, Err(SessionError::Write { .. })) {
                    self.state = State::Whole(conversation);
                }
                result
            }
        }
    }

    /// `Err(Full)` when a file of `size` bytes could not be loaded again.
    fn check_size(&self, size: u64) -> Result<(), SessionError> {
        if size > MAX_SESSION_BYTES {
            return Err(SessionError::Full {
                path: self.path.clone(),
                size,
                limit: MAX_SESSION_BYTES,
            });
        }
        Ok(())
    }

    /// Creates the transcript holding `bytes` through a temporary file renamed into place.
    fn create(&mut self, bytes: Vec<u8>) -> Result<(), SessionError> {
        self.check_size(bytes.len() as u64)?;
        replace_file(&self.path, &bytes).map_err(|source| SessionError::Write {
            path: self.path.clone(),
            source,
        })?;
        self.state = State::Transcript {
            file: None,
            len: bytes.len() as u64,
            needs_newline: false,
            torn: false,
        };
        sync_dir(&folder_of(&self.path)).map_err(|source| SessionError::SyncFolder {
            path: self.path.clone(),
            source,
        })
    }

    /// Turns the whole-file session into a transcript ending with `line`, keeping the old
    /// file as `NAME.v1.bak`.
    fn convert(&mut self, conversation: &Conversation, line: &[u8]) -> Result<(), SessionError> {
        let backup = keep_backup(&self.path).map_err(|source| SessionError::Write {
            path: self.path.clone(),
            source,
        })?;
        let mut header = SessionHeader::now();
        header.converted_from = backup
            .file_name()
            .map(|name| name.to_string_lossy().into_owned());
        let mut bytes = encode_session(&header, conversation);
        bytes.extend_from_slice(line);
        self.create(bytes)
    }
}

/// Links (or, where links are not supported, copies) the file at `path` to a free
/// `NAME.v1.bak` name beside it, fsynced.
fn keep_backup(path: &Path) -> io::Result<PathBuf> {
    let name = file_name(path)?;
    let dir = folder_of(path);
    for n in 0u32.. {
        let backup = if n == 0 {
            dir.join(format!("{name}.v1.bak"))
        } else {
            dir.join(format!("{name}.v1.{n}.bak"))
        };
        match std::fs::hard_link(path, &backup) {
            Ok(()) => return Ok(backup),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(_) => {
                // No hard links here (some network or FUSE filesystems): copy.
                let mut options = crate::private_file::options();
                let mut target = match options.create_new(true).open(&backup) {
                    Ok(file) => file,
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                };
                let result = (|| {
                    io::copy(&mut File::open(path)?, &mut target)?;
                    target.set_permissions(std::fs::metadata(path)?.permissions())?;
                    target.sync_all()
                })();
                if let Err(e) = result {
                    let _ = std::fs::remove_file(&backup);
                    return Err(e);
                }
                return Ok(backup);
            }
        }
    }
    unreachable!("invariant: `0u32..` ends only after u32::MAX backups")
}

/// An exclusive advisory lock on `NAME.lock` beside a session, held while the value lives.
#[derive(Debug)]
struct SessionLock {
    _file: File,
}

impl SessionLock {
    fn acquire(path: &Path) -> Result<SessionLock, SessionError> {
        let name = file_name(path).map_err(|source| SessionError::Lock {
            path: path.to_owned(),
            lock: path.to_owned(),
            source,
        })?;
        let lock = folder_of(path).join(format!("{name}.lock"));
        let lock_error = |source| SessionError::Lock {
            path: path.to_owned(),
            lock: lock.clone(),
            source,
        };
        let file = crate::private_file::options()
            .create(true)
            .truncate(false)
            .open(&lock)
            .map_err(lock_error)?;
        #[cfg(unix)]
        {
            use std::os::unix::io::AsRawFd;
            // `flock` rather than std's `File::try_lock` (Rust 1.89, above our 1.80 floor) or
            // another crate: libc is already in the build, and a flock is tied to this open
            // file, so it is released when the file is closed, or its process dies.
            // SAFETY: `flock` takes a descriptor, which `file` keeps open during the call.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    return Err(SessionError::Locked {
                        path: path.to_owned(),
                        lock,
                    });
                }
                return Err(lock_error(e));
            }
        }
        Ok(SessionLock { _file: file })
    }
}

/// Seconds since the Unix epoch as RFC 3339 in UTC (`2026-11-30T09:12:44Z`).
fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The network filesystem `dir` is on, by the magic number `statfs(2)` reports (Linux).
#[cfg(target_os = "linux")]
fn network_filesystem(dir: &Path) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and `stat` is a
    // plain-data struct statfs fills in; it is read only when the call succeeded.
    let kind = unsafe {
        let mut stat: libc::statfs = std::mem::zeroed();
        if libc::statfs(path.as_ptr(), &mut stat) != 0 {
            return None;
        }
        stat.f_type
    };
    // `f_type`'s type (i32, i64, u32 or u64) differs between C libraries and architectures.
    #[allow(clippy::useless_conversion, clippy::unnecessary_fallible_conversions)]
    i64::try_from(kind).ok().and_then(filesystem_name)
}

/// Elsewhere the filesystem is not told.
#[cfg(not(target_os = "linux"))]
fn network_filesystem(_dir: &Path) -> Option<&'static str> {
    None
}

/// The network filesystems among Linux's `statfs` magic numbers (`linux/magic.h`).
#[cfg(any(target_os = "linux", test))]
fn filesystem_name(magic: i64) -> Option<&'static str> {
    Some(match magic {
        0x6969 => "nfs",
        0x517B => "smb",
        0xFE53_4D42 => "smb2",
        0xFF53_4D42 => "cifs",
        0x6573_5546 => "fuse",
        0x00C3_6400 => "ceph",
        0x5346_414F => "afs",
        0x0102_1997 => "9p",
        0x0BD0_0BD0 => "lustre",
        0x4750_4653 => "gpfs",
        _ => return None,
    })
}

fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}

fn file_name(path: &Path) -> io::Result<String> {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the session path has no file name",
            )
        })
}

/// Writes a fsynced temporary file beside `path` and renames it over `path`, which keeps
/// its mode if it exists.
fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = file_name(path)?;
    let dir = folder_of(path);
    let permissions = std::fs::metadata(path).ok().map(|m| m.permissions());
    let (temp, mut file) = create_temp(&dir, &name)?;
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

fn create_temp(dir: &Path, name: &str) -> io::Result<(PathBuf, File)> {
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
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    // Windows cannot open a folder as a file; the rename is made durable by the filesystem.
    Ok(())
}

/// A forced failure in the middle of a write, for tests only.
/// Accepts `version` when it is `expected`; a larger number is a file from a newer rebound,
/// anything else is not a version.
fn check_version(version: &Value, expected: u64) -> Result<(), SessionFormatError> {
    match version.as_u64() {
        Some(v) if v == expected => Ok(()),
        Some(found) if found > expected => Err(SessionFormatError::NewerVersion {
            found,
            supported: SESSION_VERSION,
        }),
        _ => Err(SessionFormatError::BadVersion {
            found: rebound_core::tool::bounded(&version.to_string(), 60),
        }),
    }
}

/// Keeps the counted rows of `docs/robustness.md` true (shared with the hostile tests).
#[cfg(test)]
#[path = "../tests/hostile_support/table.rs"]
mod robustness_table;

#[cfg(test)]
mod failpoint {
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    static FAIL: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    /// The next write to `path` fails (after creating its temp file, or before appending).
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

    use super::robustness_table as table;

    #[tokio::test]
    async fn creating_a_session_failing_midway_leaves_no_file_and_no_temp_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.jsonl");
        let (store, _) = SessionStore::open(&path).await.expect("open");
        failpoint::arm(&path);
        let err = store
            .append(&Message::user_text("first"))
            .await
            .expect_err("forced failure");
        assert!(matches!(err, SessionError::Write { .. }), "{err}");
        assert!(err.to_string().contains("s.jsonl"), "{err}");
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["s.jsonl.lock"]);
        store
            .append(&Message::user_text("first"))
            .await
            .expect("next write works");
        assert_eq!(store.load().await.expect("load").len(), 1);
    }

    #[tokio::test]
    async fn a_failed_append_is_cut_off_by_the_next_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.jsonl");
        let (store, _) = SessionStore::open(&path).await.expect("open");
        store
            .append(&Message::user_text("first"))
            .await
            .expect("append");
        // What a write failing halfway (disk full) leaves: half a line.
        let line = message_line(&Message::assistant_text("lost"));
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open")
            .write_all(&line[..line.len() / 2])
            .expect("write");
        failpoint::arm(&path);
        store
            .append(&Message::assistant_text("second"))
            .await
            .expect_err("forced failure");
        store
            .append(&Message::assistant_text("third"))
            .await
            .expect("append");
        let bytes = std::fs::read(&path).expect("read");
        let texts: Vec<String> = decode_session(&bytes)
            .expect("decodes")
            .messages()
            .iter()
            .map(|m| m.text())
            .collect();
        assert_eq!(texts, ["first", "third"]);
        assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 3);
    }

    #[tokio::test]
    async fn a_change_past_the_size_limit_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.jsonl");
        let (store, _) = SessionStore::open(&path).await.expect("open");
        store
            .append(&Message::user_text("first"))
            .await
            .expect("append");
        let before = std::fs::read(&path).expect("read");
        // As if the complete lines were 10 bytes short of the limit (a real file that size
        // would take a gigabyte of disk and memory in a test).
        match &mut store.writer.lock().await.state {
            State::Transcript { len, .. } => *len = MAX_SESSION_BYTES - 10,
            other => panic!("not a transcript: {other:?}"),
        }
        let err = store
            .append(&Message::assistant_text("one line too many"))
            .await
            .expect_err("past the limit");
        assert!(
            matches!(err, SessionError::Full { size, limit, .. }
                if size > limit && limit == MAX_SESSION_BYTES),
            "{err}"
        );
        assert!(
            err.to_string().contains("start a new session file"),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).expect("read"), before);
        let err = store
            .replace(&Conversation::from(vec![Message::user_text("compacted")]))
            .await
            .expect_err("a compaction line past the limit too");
        assert!(matches!(err, SessionError::Full { .. }), "{err}");
        assert_eq!(std::fs::read(&path).expect("read"), before);
        table::check("session-size-limit", 2);
    }

    #[test]
    fn the_writers_depth_limit_is_the_loaders() {
        let line = |levels: usize| {
            let mut text = format!("{}{}", "[".repeat(levels), "]".repeat(levels));
            text.insert_str(1, "\"[{\\\"\",");
            text
        };
        assert_eq!(
            nesting_depth(line(MAX_LINE_DEPTH).as_bytes()),
            MAX_LINE_DEPTH
        );
        assert!(serde_json::from_str::<Value>(&line(MAX_LINE_DEPTH)).is_ok());
        assert_eq!(
            nesting_depth(line(MAX_LINE_DEPTH + 1).as_bytes()),
            MAX_LINE_DEPTH + 1
        );
        assert!(serde_json::from_str::<Value>(&line(MAX_LINE_DEPTH + 1)).is_err());
    }

    #[test]
    fn network_filesystems_are_told_by_their_magic_numbers() {
        assert_eq!(filesystem_name(0x6969), Some("nfs"));
        assert_eq!(filesystem_name(0xFF53_4D42), Some("cifs"));
        assert_eq!(filesystem_name(0x6573_5546), Some("fuse"));
        let network = [
            0x517B,
            0xFE53_4D42,
            0x00C3_6400,
            0x5346_414F,
            0x0102_1997,
            0x0BD0_0BD0,
            0x4750_4653,
        ];
        assert!(network.iter().all(|&m| filesystem_name(m).is_some()));
        // ext4, tmpfs, xfs, btrfs, overlayfs
        let local = [0xEF53, 0x0102_1994, 0x5846_5342, 0x9123_683E, 0x794C_7630];
        for magic in local {
            assert_eq!(filesystem_name(magic), None, "{magic:#x}");
        }
        table::check("session-network-fs", 3 + network.len() + local.len());
    }

    #[tokio::test]
    async fn a_session_on_a_local_disk_is_not_on_a_network_filesystem() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, _) = SessionStore::open(dir.path().join("s.jsonl"))
            .await
            .expect("open");
        assert_eq!(store.network_filesystem(), None);
    }

    #[test]
    fn the_created_time_is_rfc3339_utc() {
        let created = rfc3339_now();
        assert_eq!(created.len(), 20, "{created}");
        assert!(
            created.starts_with("20") && created.ends_with('Z'),
            "{created}"
        );
        assert_eq!(&created[10..11], "T");
    }
}

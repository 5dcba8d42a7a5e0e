//! The built-in file tools `read`, `list` and `write`, confined to a root folder.
//!
//! Every path the model gives is relative to the root. A path is refused — as an error result
//! the model reads, never followed — when it is absolute, contains `..`, or passes through a
//! symbolic link that resolves outside the root. `write` refuses every symbolic link on its
//! way (a symlinked parent folder or a symlink at the target), even one that points inside.
//! `read` refuses anything but regular files (a FIFO would block it forever).
//!
//! ```
//! use rebound_effects::tools::{files, ToolSet};
//!
//! let dir = std::env::temp_dir();
//! let tools = ToolSet::builder().tools(files::tools(&dir)?).build().unwrap();
//! let names: Vec<&str> = tools.specs().iter().map(|s| s.name.as_str()).collect();
//! assert_eq!(names, ["read", "list", "write"]);
//! # Ok::<(), files::RootError>(())
//! ```
//!
//! What the confinement does not cover: a hard link inside the root to a file outside it (it
//! is indistinguishable from a file), and another process swapping a folder for a symlink
//! between the check and the access.

use super::{Tool, ToolContext, ToolError};
use async_trait::async_trait;
use rebound_core::{ToolOutput, ToolSpec};
use serde_json::{json, Value};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// Default cap on what `read` returns: 256 KiB.
pub const DEFAULT_READ_MAX_BYTES: usize = 256 * 1024;
/// Default cap on the entries `list` shows.
pub const DEFAULT_LIST_MAX_ENTRIES: usize = 1000;
/// Default cap on the content `write` accepts: 1 MiB.
pub const DEFAULT_WRITE_MAX_BYTES: usize = 1024 * 1024;

/// `list` stops reading a folder after this many entries, whatever its display cap.
const LIST_SCAN_LIMIT: usize = 100_000;

/// Why a root folder cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RootError {
    /// The folder cannot be resolved (missing, no permission).
    #[error("tools root `{path}` cannot be used: {source}")]
    Unusable {
        /// The path as given.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The path names something that is not a folder.
    #[error("tools root `{path}` is not a folder")]
    NotAFolder {
        /// The path as given.
        path: PathBuf,
    },
}

/// The folder the file tools are confined to. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Root {
    path: Arc<PathBuf>,
}

impl Root {
    /// Resolves `path` (following symlinks once, here, so the root may itself be a link) and
    /// checks that it is a folder.
    pub fn new(path: impl AsRef<Path>) -> Result<Self, RootError> {
        let given = path.as_ref();
        let canonical = std::fs::canonicalize(given).map_err(|source| RootError::Unusable {
            path: given.to_owned(),
            source,
        })?;
        if !canonical.is_dir() {
            return Err(RootError::NotAFolder {
                path: given.to_owned(),
            });
        }
        Ok(Root {
            path: Arc::new(canonical),
        })
    }

    /// The resolved root folder.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Resolves a path the model gave, refusing any way out of the root.
    async fn resolve(&self, given: &str, access: Access) -> Result<PathBuf, ToolError> {
        let names = relative_names(given)?;
        if names.is_empty() {
            return match access {
                Access::List => Ok(self.path.to_path_buf()),
                Access::Read => Err(ToolError::model(
                    "the path names the root folder, not a file: use `list` to see what is in it",
                )),
                Access::Write => Err(ToolError::model(
                    "the path names the root folder: give a file path such as `notes.txt`",
                )),
            };
        }
        let mut current = self.path.to_path_buf();
        for (i, name) in names.iter().enumerate() {
            current.push(name);
            let shown = names[..=i].join("/");
            let last = i + 1 == names.len();
            let meta = match tokio::fs::symlink_metadata(&current).await {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return match access {
                        // The rest is created inside a folder already checked.
                        Access::Write => {
                            current.extend(&names[i + 1..]);
                            Ok(current)
                        }
                        Access::Read | Access::List => {
                            let what = if access == Access::Read {
                                "file"
                            } else {
                                "folder"
                            };
                            let full = names.join("/");
                            Err(ToolError::model(if last {
                                format!("{what} not found: {full}")
                            } else {
                                format!("{what} not found: {full} (there is no folder `{shown}`)")
                            }))
                        }
                    };
                }
                Err(e) => return Err(io_refusal(&shown, &e)),
            };
            let meta = if meta.file_type().is_symlink() {
                if access == Access::Write {
                    return Err(ToolError::model(format!(
                        "`{shown}` is a symbolic link; `write` does not write through symbolic \
                         links: write to a path without one"
                    )));
                }
                let target = tokio::fs::canonicalize(&current).await.map_err(|_| {
                    ToolError::model(format!(
                        "`{shown}` is a broken symbolic link (its target does not exist)"
                    ))
                })?;
                if !target.starts_with(self.path.as_path()) {
                    return Err(ToolError::model(format!(
                        "`{shown}` is a symbolic link to a place outside the root folder; \
                         it is not followed: use paths inside the root"
                    )));
                }
                current = target;
                tokio::fs::metadata(&current)
                    .await
                    .map_err(|e| io_refusal(&shown, &e))?
            } else {
                meta
            };
            if !last && !meta.is_dir() {
                return Err(ToolError::model(format!("`{shown}` is not a folder")));
            }
        }
        Ok(current)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    List,
    Write,
}

/// The normal components of a relative path; refuses absolute paths and `..`.
fn relative_names(given: &str) -> Result<Vec<String>, ToolError> {
    if given.contains('\0') {
        return Err(ToolError::model("the path contains a NUL byte"));
    }
    if given.len() > MAX_PATH_BYTES {
        // Refused before any error message can echo it back in full.
        return Err(ToolError::model(format!(
            "the path is {} bytes long; paths are limited to {MAX_PATH_BYTES} bytes",
            given.len()
        )));
    }
    let mut names = Vec::new();
    for component in Path::new(given).components() {
        match component {
            Component::Prefix(_) | Component::RootDir => {
                return Err(ToolError::model(format!(
                    "absolute paths are not allowed (`{}`): give a path relative to the root \
                     folder, such as `src/main.rs`",
                    shorten(given)
                )))
            }
            Component::ParentDir => {
                return Err(ToolError::model(format!(
                    "`..` is not allowed in paths (`{}`): paths must stay inside the root \
                     folder; give a path relative to it, such as `src/main.rs`",
                    shorten(given)
                )))
            }
            Component::CurDir => {}
            Component::Normal(name) => names.push(name.to_string_lossy().into_owned()),
        }
    }
    Ok(names)
}

/// The longest path accepted from the model (Linux's `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;

fn shorten(text: &str) -> String {
    super::schema::bounded(text, 200)
}

/// A model-readable refusal for an I/O error on `shown`.
fn io_refusal(shown: &str, e: &io::Error) -> ToolError {
    let shown = shorten(shown);
    match e.kind() {
        io::ErrorKind::PermissionDenied => ToolError::model(format!("permission denied: {shown}")),
        io::ErrorKind::NotFound => ToolError::model(format!("not found: {shown}")),
        _ => ToolError::model(format!("cannot access `{shown}`: {e}")),
    }
}

fn path_arg<'a>(input: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    input[key]
        .as_str()
        .ok_or_else(|| ToolError::model(format!("`{key}` must be a string")))
}

/// The three file tools on one root, with default limits: `read`, `list`, `write`.
pub fn tools(root: impl AsRef<Path>) -> Result<Vec<Arc<dyn Tool>>, RootError> {
    let root = Root::new(root)?;
    Ok(vec![
        Arc::new(ReadTool::new(root.clone())),
        Arc::new(ListTool::new(root.clone())),
        Arc::new(WriteTool::new(root)),
    ])
}

/// `read`: a UTF-8 text file under the root, from an optional byte offset, capped in size.
///
/// Output longer than the cap ends with a note telling the model the `offset` to continue
/// from. Binary files (with NUL bytes) and files that are not UTF-8 are refused with a clear
/// error.
#[derive(Debug, Clone)]
pub struct ReadTool {
    root: Root,
    max_bytes: usize,
}

impl ReadTool {
    /// `read` on `root`, returning at most [`DEFAULT_READ_MAX_BYTES`] per call.
    #[must_use]
    pub fn new(root: Root) -> Self {
        ReadTool {
            root,
            max_bytes: DEFAULT_READ_MAX_BYTES,
        }
    }

    /// Returns at most `max_bytes` (at least 4) per call.
    #[must_use]
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes.max(4);
        self
    }
}

#[async_trait]
impl Tool for ReadTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read".into(),
            description: format!(
                "Read a UTF-8 text file inside the workspace. Returns at most {} bytes; for \
                 longer files the output ends with the `offset` to read from next.",
                self.max_bytes
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File path relative to the workspace root, e.g. `src/main.rs`."
                    },
                    "offset": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "Byte offset to start reading at (default 0)."
                    }
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }

    async fn invoke(&self, input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let given = path_arg(&input, "path")?;
        // JSON Schema's "integer" also accepts `3.0`.
        let offset = match input.get("offset") {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_u64()
                .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
                .ok_or_else(|| ToolError::model("`offset` must be a non-negative integer"))?,
        };
        let path = self.root.resolve(given, Access::Read).await?;
        let shown = shorten(given);
        let meta = tokio::fs::metadata(&path)
            .await
            .map_err(|e| io_refusal(&shown, &e))?;
        if meta.is_dir() {
            return Err(ToolError::model(format!(
                "`{shown}` is a folder, not a file: use `list` to see what is in it"
            )));
        }
        if !meta.is_file() {
            return Err(ToolError::model(format!(
                "`{shown}` is not a regular file (a device, socket or pipe); `read` reads files only"
            )));
        }
        let size = meta.len();
        if offset > size {
            return Err(ToolError::model(format!(
                "offset {offset} is past the end of `{shown}` ({size} bytes)"
            )));
        }
        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| io_refusal(&shown, &e))?;
        file.seek(io::SeekFrom::Start(offset))
            .await
            .map_err(|e| io_refusal(&shown, &e))?;
        let mut buf = Vec::with_capacity(self.max_bytes.min(usize::try_from(size).unwrap_or(0)));
        file.take(self.max_bytes as u64)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| io_refusal(&shown, &e))?;
        if buf.contains(&0) {
            return Err(ToolError::model(format!(
                "`{shown}` looks like a binary file ({size} bytes, contains NUL bytes); `read` \
                 shows UTF-8 text only"
            )));
        }
        // An offset may land inside a multi-byte character: start at the next one.
        let skip = if offset > 0 {
            buf.iter()
                .take(3)
                .take_while(|&&b| b & 0xC0 == 0x80)
                .count()
        } else {
            0
        };
        let end_of_read = offset + buf.len() as u64;
        let text = match std::str::from_utf8(&buf[skip..]) {
            Ok(text) => text,
            // A character cut by the size cap: stop before it.
            Err(e) if e.error_len().is_none() && end_of_read < size => {
                std::str::from_utf8(&buf[skip..skip + e.valid_up_to()]).unwrap_or_default()
            }
            Err(e) => {
                return Err(ToolError::model(format!(
                    "`{shown}` is not UTF-8 text (invalid byte at offset {}); `read` shows \
                     UTF-8 text only",
                    offset + (skip + e.valid_up_to()) as u64
                )))
            }
        };
        let start = offset + skip as u64;
        let end = start + text.len() as u64;
        if size == 0 {
            return Ok(ToolOutput::text(format!("(`{shown}` is empty)")));
        }
        let mut out = text.to_owned();
        if end < size {
            out.push_str(&format!(
                "\n[truncated: showed bytes {start}..{end} of {size}; call `read` with \
                 `offset` {end} to see more]"
            ));
        }
        Ok(ToolOutput::text(out))
    }
}

/// `list`: the entries of a folder under the root, sorted by name, capped in number.
///
/// Folders end with `/`, symbolic links are marked (and not followed), files show their size.
#[derive(Debug, Clone)]
pub struct ListTool {
    root: Root,
    max_entries: usize,
}

impl ListTool {
    /// `list` on `root`, showing at most [`DEFAULT_LIST_MAX_ENTRIES`] entries.
    #[must_use]
    pub fn new(root: Root) -> Self {
        ListTool {
            root,
            max_entries: DEFAULT_LIST_MAX_ENTRIES,
        }
    }

    /// Shows at most `max_entries` (at least 1) entries per call.
    #[must_use]
    pub fn with_max_entries(mut self, max_entries: usize) -> Self {
        self.max_entries = max_entries.max(1);
        self
    }
}

#[async_trait]
impl Tool for ListTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list".into(),
            description: format!(
                "List the entries of a folder inside the workspace (not recursive), sorted by \
                 name: folders end with `/`, files show their size. At most {} entries.",
                self.max_entries
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Folder path relative to the workspace root; `.` or omitted for the root."
                    }
                },
                "additionalProperties": false
            }),
        }
    }

    async fn invoke(&self, input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let given = match input.get("path") {
            None | Some(Value::Null) => ".",
            Some(_) => path_arg(&input, "path")?,
        };
        let path = self.root.resolve(given, Access::List).await?;
        let shown = shorten(given);
        let meta = tokio::fs::metadata(&path)
            .await
            .map_err(|e| io_refusal(&shown, &e))?;
        if !meta.is_dir() {
            return Err(ToolError::model(format!(
                "`{shown}` is a file, not a folder: use `read` to see its content"
            )));
        }
        let mut dir = tokio::fs::read_dir(&path)
            .await
            .map_err(|e| io_refusal(&shown, &e))?;
        let mut entries: Vec<(String, String)> = Vec::new();
        let mut more_than_scanned = false;
        while let Some(entry) = dir.next_entry().await.map_err(|e| io_refusal(&shown, &e))? {
            if entries.len() == LIST_SCAN_LIMIT {
                more_than_scanned = true;
                break;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let line = match entry.metadata().await {
                Ok(m) if m.file_type().is_symlink() => format!("{name}@ (symbolic link)"),
                Ok(m) if m.is_dir() => format!("{name}/"),
                Ok(m) if m.is_file() => format!("{name} ({} bytes)", m.len()),
                Ok(_) => format!("{name} (special file)"),
                Err(_) => format!("{name} (unreadable)"),
            };
            entries.push((name, line));
        }
        if entries.is_empty() {
            return Ok(ToolOutput::text(format!("(`{shown}` is an empty folder)")));
        }
        entries.sort();
        let total = entries.len();
        let mut out: Vec<String> = entries
            .into_iter()
            .take(self.max_entries)
            .map(|(_, line)| line)
            .collect();
        if total > self.max_entries || more_than_scanned {
            out.push(format!(
                "[{}{} more entries not shown]",
                if more_than_scanned { "at least " } else { "" },
                total - self.max_entries.min(total)
            ));
        }
        Ok(ToolOutput::text(out.join("\n")))
    }
}

/// `write`: creates or replaces a file under the root with the given text, creating parent
/// folders inside the root as needed. Content is capped in size.
#[derive(Debug, Clone)]
pub struct WriteTool {
    root: Root,
    max_bytes: usize,
}

impl WriteTool {
    /// `write` on `root`, accepting at most [`DEFAULT_WRITE_MAX_BYTES`] per call.
    #[must_use]
    pub fn new(root: Root) -> Self {
        WriteTool {
            root,
            max_bytes: DEFAULT_WRITE_MAX_BYTES,
        }
    }

    /// Accepts at most `max_bytes` of content per call.
    #[must_use]
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self
    }
}

#[async_trait]
impl Tool for WriteTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write".into(),
            description: format!(
                "Create or replace a text file inside the workspace with `content`, creating \
                 missing parent folders. At most {} bytes.",
                self.max_bytes
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File path relative to the workspace root, e.g. `notes/todo.md`."
                    },
                    "content": {
                        "type": "string",
                        "description": "The complete new content of the file."
                    }
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        }
    }

    async fn invoke(&self, input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let given = path_arg(&input, "path")?;
        let content = path_arg(&input, "content")?;
        let shown = shorten(given);
        if content.len() > self.max_bytes {
            return Err(ToolError::model(format!(
                "the content is {} bytes; `write` accepts at most {} bytes per call: write a \
                 smaller file",
                content.len(),
                self.max_bytes
            )));
        }
        if given.ends_with('/') {
            return Err(ToolError::model(format!(
                "`{shown}` names a folder: give a file path such as `{shown}notes.txt`"
            )));
        }
        let path = self.root.resolve(given, Access::Write).await?;
        let existed = match tokio::fs::symlink_metadata(&path).await {
            Ok(m) if m.is_dir() => {
                return Err(ToolError::model(format!(
                    "`{shown}` is a folder; `write` writes files"
                )))
            }
            Ok(m) if !m.is_file() => {
                return Err(ToolError::model(format!(
                    "`{shown}` is not a regular file; `write` writes regular files only"
                )))
            }
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(io_refusal(&shown, &e)),
        };
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| io_refusal(&shown, &e))?;
        }
        tokio::fs::write(&path, content)
            .await
            .map_err(|e| io_refusal(&shown, &e))?;
        Ok(ToolOutput::text(format!(
            "wrote {} bytes to `{shown}` ({})",
            content.len(),
            if existed {
                "replaced its previous content"
            } else {
                "new file"
            }
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_names_refuse_ways_out() {
        assert!(relative_names("/etc/passwd").is_err());
        assert!(relative_names("a/../../b").is_err());
        assert!(relative_names("..").is_err());
        assert!(relative_names("a\0b").is_err());
        assert_eq!(
            relative_names("./src//main.rs").ok(),
            Some(vec!["src".to_owned(), "main.rs".to_owned()])
        );
        assert_eq!(relative_names(".").ok(), Some(vec![]));
    }
}

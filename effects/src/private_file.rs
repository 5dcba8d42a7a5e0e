//! Files only their owner can read, for everything rebound writes that holds a conversation:
//! sessions (and their temporary files, backups and lock files), traces.
//!
//! A new file is created with mode 0600 (on Unix; elsewhere the platform's default), set by
//! the `open` call itself, so there is no moment when it exists with a wider mode. An existing
//! file keeps the mode it has: a user who shared a trace with their group on purpose keeps it
//! shared. (A session is created, or converted from the old whole-file form, through a
//! temporary file renamed over it; the session store gives it the old file's mode.)
//!
//! ```
//! # fn main() -> std::io::Result<()> {
//! use std::io::Write;
//!
//! let path = std::env::temp_dir().join(format!("rebound-private-{}.jsonl", std::process::id()));
//! let mut trace = rebound_effects::private_file::create(&path)?;
//! trace.write_all(b"{}\n")?;
//! # #[cfg(unix)]
//! # {
//! use std::os::unix::fs::PermissionsExt;
//! assert_eq!(std::fs::metadata(&path)?.permissions().mode() & 0o777, 0o600);
//! # }
//! # std::fs::remove_file(&path)?;
//! # Ok(()) }
//! ```

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// The mode of a file rebound creates: read and write for its owner, nothing for others.
pub const MODE: u32 = 0o600;

/// Options that open a file for writing and, when they create it, create it owner-only.
/// Add `create`, `create_new`, `truncate` or `append` as needed.
#[must_use]
pub fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(MODE);
    }
    options
}

/// Opens `path` for writing, emptied: a new file is created owner-only, an existing one keeps
/// its mode. The private counterpart of [`File::create`].
pub fn create(path: &Path) -> io::Result<File> {
    options().create(true).truncate(true).open(path)
}

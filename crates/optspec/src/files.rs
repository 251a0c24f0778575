//! The one bounded file reader of the option front ends: `--config`
//! includes, `file:` includes, allow/deny lists, `--flow-weights`.
//!
//! A read refuses a file over a caller-given limit, one that is not UTF-8
//! and a directory, and gives the text with an identity for include-loop
//! detection. Errors are typed, not worded: each front end words them as it
//! always has (its messages are tested), see [`ReadError`].
//!
//! [`FsFiles`] reads the file system; [`MemFiles`] holds files in memory so
//! tests of a front end need no file system.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// `ENOENT`, what a missing file gives (the same on Linux, the BSDs and macOS).
const ENOENT: i32 = 2;
/// `EISDIR`, what reading a directory gives (the same on Linux, the BSDs and macOS).
const EISDIR: i32 = 21;

/// A file read whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileText {
    /// The file's identity for include-loop detection: two paths naming
    /// the same file (a symlink, `a/../b`) have the same identity.
    pub identity: PathBuf,
    pub text: String,
}

/// Why a file was refused.
#[derive(Debug)]
pub enum ReadError {
    /// The OS refused to open or read it (missing, permissions, ...).
    Io(io::Error),
    /// It is a directory.
    Directory,
    /// It has more than `limit` bytes.
    TooLarge { limit: u64 },
    /// It is not a regular file (a FIFO, a device, a socket): reading one
    /// could block traffic_server's start or reload for ever.
    NotRegular { kind: &'static str },
    /// It is not UTF-8; the first `valid_up_to` bytes are.
    NotUtf8 { valid_up_to: usize },
}

impl ReadError {
    /// What `std::fs::read_to_string` says for the same file, for front
    /// ends that read files that way before and keep its wording: the
    /// OS's message for a directory, std's for text that is not UTF-8.
    /// A file over the limit, which std never refused, is "larger than N
    /// bytes".
    pub fn std_wording(&self) -> String {
        match self {
            ReadError::Io(e) => e.to_string(),
            ReadError::Directory => io::Error::from_raw_os_error(EISDIR).to_string(),
            ReadError::TooLarge { limit } => format!("larger than {limit} bytes"),
            ReadError::NotRegular { kind } => format!("not a regular file ({kind})"),
            ReadError::NotUtf8 { .. } => "stream did not contain valid UTF-8".to_owned(),
        }
    }
}

/// A plain wording: the OS's message, "a directory", "larger than N
/// bytes", "not UTF-8 text (byte N)".
impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Directory => f.write_str("a directory"),
            ReadError::TooLarge { limit } => write!(f, "larger than {limit} bytes"),
            ReadError::NotRegular { kind } => write!(f, "not a regular file ({kind})"),
            ReadError::NotUtf8 { valid_up_to } => {
                write!(f, "not UTF-8 text (byte {valid_up_to})")
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// Reads configuration, include and list files; injected so front ends
/// are tested without a file system.
pub trait Files: Send + Sync {
    /// The text of the file at `path` (already resolved), refusing files
    /// over `limit` bytes, not UTF-8, or directories.
    fn read(&self, path: &Path, limit: u64) -> Result<FileText, ReadError>;
}

/// The real file system. Reads at most `limit + 1` bytes, whatever the
/// file's size (it may grow while read, or be a pipe).
#[derive(Clone, Copy, Debug, Default)]
pub struct FsFiles;

impl Files for FsFiles {
    fn read(&self, path: &Path, limit: u64) -> Result<FileText, ReadError> {
        let text = checked(read_bytes(path, limit)?, limit)?;
        // A name that cannot be canonicalised (removed meanwhile) is its own identity.
        let identity = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(FileText { identity, text })
    }
}

/// Resolves a configuration file's name: a relative name is relative to
/// the configuration directory, an absolute one stays.
pub fn resolve(config_dir: &Path, name: &str) -> PathBuf {
    let p = Path::new(name);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        config_dir.join(p)
    }
}

/// The bytes of the file at `path`, refusing a directory, anything but a
/// regular file, or more than `limit` bytes (reading at most `limit + 1`):
/// for a file that need not be text, such as the peer secret. [`FsFiles`]
/// reads through it.
///
/// Opened non-blocking, then checked: opening a FIFO for reading would
/// otherwise wait for a writer (and a device's read may never end), and
/// these reads run on traffic_server's start and reload paths. A regular
/// file reads the same either way.
pub fn read_bytes(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(ReadError::Io)?;
    let kind = file.metadata().map_err(ReadError::Io)?.file_type();
    if kind.is_dir() {
        return Err(ReadError::Directory);
    }
    if !kind.is_file() {
        let kind = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "not a file"
        };
        return Err(ReadError::NotRegular { kind });
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

/// The bounds every reader applies to a file's bytes.
fn checked(bytes: Vec<u8>, limit: u64) -> Result<String, ReadError> {
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    String::from_utf8(bytes).map_err(|e| ReadError::NotUtf8 {
        valid_up_to: e.utf8_error().valid_up_to(),
    })
}

#[derive(Clone, Debug)]
enum Entry {
    File(Vec<u8>),
    Dir,
}

/// Files in memory, keyed by their full path, which is also their
/// identity. A missing path gives the OS's "No such file or directory".
#[derive(Clone, Debug, Default)]
pub struct MemFiles(HashMap<PathBuf, Entry>);

impl MemFiles {
    pub fn new() -> Self {
        Self::default()
    }

    /// The files of `(path, text)` pairs.
    pub fn of(files: &[(&str, &str)]) -> Self {
        files
            .iter()
            .fold(Self::new(), |m, (path, text)| m.with(path, text))
    }

    /// Adds (or replaces) a file.
    pub fn with(self, path: &str, text: &str) -> Self {
        self.with_bytes(path, text.as_bytes())
    }

    /// Adds a file of any bytes (not UTF-8, say).
    pub fn with_bytes(mut self, path: &str, bytes: &[u8]) -> Self {
        self.0
            .insert(PathBuf::from(path), Entry::File(bytes.to_vec()));
        self
    }

    /// Adds a directory.
    pub fn with_dir(mut self, path: &str) -> Self {
        self.0.insert(PathBuf::from(path), Entry::Dir);
        self
    }

    /// Adds or replaces a file in place (a test changing a file between reloads).
    pub fn insert(&mut self, path: &str, text: &str) {
        self.0
            .insert(PathBuf::from(path), Entry::File(text.as_bytes().to_vec()));
    }
}

impl Files for MemFiles {
    fn read(&self, path: &Path, limit: u64) -> Result<FileText, ReadError> {
        match self.0.get(path) {
            None => Err(ReadError::Io(io::Error::from_raw_os_error(ENOENT))),
            Some(Entry::Dir) => Err(ReadError::Directory),
            Some(Entry::File(bytes)) => Ok(FileText {
                identity: path.to_path_buf(),
                text: checked(bytes.clone(), limit)?,
            }),
        }
    }
}

#[cfg(test)]
mod tests;

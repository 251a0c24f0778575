//! The shared secret and the datagram MAC (HMAC-SHA256).

use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Shortest secret accepted: 16 bytes (128 bits).
pub const MIN_SECRET_LEN: usize = 16;
/// Largest secret file read: a secret is a line, and a path mistyped to a
/// log or a device must fail the load, not fill memory.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 << 10;

/// A keyed HMAC, ready to sign or verify (keyed once; cloned per datagram).
#[derive(Clone)]
pub struct Key(HmacSha256);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<secret>)")
    }
}

impl Key {
    /// A key from the secret's bytes; at least [`MIN_SECRET_LEN`] of them.
    pub fn new(secret: &[u8]) -> Result<Key, String> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(format!(
                "the peer secret is {} bytes; at least {MIN_SECRET_LEN} are required",
                secret.len()
            ));
        }
        HmacSha256::new_from_slice(secret)
            .map(Key)
            .map_err(|e| format!("the peer secret cannot key HMAC-SHA256: {e}"))
    }

    /// The secret from a file: its contents less trailing whitespace (a
    /// final newline). Errors name the file and say what is wrong.
    pub fn from_file(path: &Path) -> Result<Key, String> {
        // Bytes, not text: a secret may be any bytes. std's wording, as
        // when it was read with std::fs::read.
        let bytes = optspec::files::read_bytes(path, MAX_SECRET_FILE_BYTES)
            .map_err(|e| format!("peer secret file {}: {}", path.display(), e.std_wording()))?;
        let end = bytes
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        Key::new(&bytes[..end]).map_err(|e| format!("peer secret file {}: {e}", path.display()))
    }

    pub fn sign(&self, body: &[u8]) -> [u8; 32] {
        let mut m = self.0.clone();
        m.update(body);
        m.finalize().into_bytes().into()
    }

    /// Constant-time comparison of `mac` with the MAC of `body`.
    pub fn verify(&self, body: &[u8], mac: &[u8]) -> bool {
        let mut m = self.0.clone();
        m.update(body);
        m.verify_slice(mac).is_ok()
    }
}

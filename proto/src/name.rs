//! Lockspace names: 1 to 64 bytes, no NUL, no `/` (the name is a sysfs and configfs
//! directory), stored inline so that carrying one never allocates.

use std::fmt;

use crate::DLM_LOCKSPACE_LEN;

/// Why a byte string is not a lockspace name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty.
    #[error("lockspace name is empty")]
    Empty,
    /// The name is longer than `DLM_LOCKSPACE_LEN` bytes.
    #[error("lockspace name is {0} bytes, at most 64 allowed")]
    TooLong(usize),
    /// The name contains a byte that cannot appear in a sysfs directory name.
    #[error("lockspace name contains byte {byte:#04x} at offset {offset}")]
    BadByte {
        /// The offending byte.
        byte: u8,
        /// Where it is.
        offset: usize,
    },
}

/// A validated lockspace name (the kernel's `ls_name`, the CPG group `dlm:ls:<name>`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockspaceName {
    bytes: [u8; DLM_LOCKSPACE_LEN],
    len: u8,
}

impl LockspaceName {
    /// Validates `bytes` as a lockspace name.
    pub fn new(bytes: &[u8]) -> Result<Self, NameError> {
        if bytes.is_empty() {
            return Err(NameError::Empty);
        }
        if bytes.len() > DLM_LOCKSPACE_LEN {
            return Err(NameError::TooLong(bytes.len()));
        }
        if let Some(offset) = bytes.iter().position(|&b| b == 0 || b == b'/') {
            return Err(NameError::BadByte {
                byte: bytes[offset],
                offset,
            });
        }
        let mut out = [0u8; DLM_LOCKSPACE_LEN];
        out[..bytes.len()].copy_from_slice(bytes);
        let len = u8::try_from(bytes.len()).map_err(|_| NameError::TooLong(bytes.len()))?;
        Ok(Self { bytes: out, len })
    }

    /// Reads a name from a fixed C buffer: up to the first NUL, or all of it when it has none
    /// (`dlmc_header.name` is not NUL-terminated when the name is 64 bytes long).
    pub fn from_c_buf(buf: &[u8]) -> Result<Self, NameError> {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Self::new(&buf[..end])
    }

    /// The name's bytes, without any terminator.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The name as text when it is UTF-8 (names are ASCII in practice).
    pub fn to_str_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.as_bytes())
    }

    /// The name NUL-padded into a 64-byte C buffer.
    pub fn to_c_buf(&self) -> [u8; DLM_LOCKSPACE_LEN] {
        self.bytes
    }
}

impl fmt::Display for LockspaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_str_lossy())
    }
}

impl fmt::Debug for LockspaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockspaceName({:?})", self.to_str_lossy())
    }
}

impl TryFrom<&str> for LockspaceName {
    type Error = NameError;
    fn try_from(s: &str) -> Result<Self, NameError> {
        Self::new(s.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_rejects() {
        assert_eq!(
            LockspaceName::new(b"foo").map(|n| n.to_string()),
            Ok("foo".into())
        );
        assert_eq!(LockspaceName::new(b""), Err(NameError::Empty));
        assert_eq!(LockspaceName::new(&[b'a'; 65]), Err(NameError::TooLong(65)));
        assert!(LockspaceName::new(&[b'a'; 64]).is_ok());
        assert_eq!(
            LockspaceName::new(b"a/b"),
            Err(NameError::BadByte {
                byte: b'/',
                offset: 1
            })
        );
        assert_eq!(
            LockspaceName::new(b"ab\0"),
            Err(NameError::BadByte { byte: 0, offset: 2 })
        );
    }

    #[test]
    fn c_buffers() {
        let mut buf = [0u8; 64];
        buf[..3].copy_from_slice(b"gfs");
        let n = LockspaceName::from_c_buf(&buf).expect("valid");
        assert_eq!(n.as_bytes(), b"gfs");
        assert_eq!(n.to_c_buf(), buf);
        let full = [b'x'; 64];
        assert_eq!(
            LockspaceName::from_c_buf(&full).map(|n| n.as_bytes().len()),
            Ok(64)
        );
    }
}

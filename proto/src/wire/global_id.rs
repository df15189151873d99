//! The lockspace global id: CRC-32 (IEEE, zlib's) of the CPG group name `dlm:ls:<name>`
//! including its trailing NUL (crc.c `cpgname_to_crc`).

use crate::LockspaceName;

#[allow(clippy::cast_possible_truncation)] // i < 256
const fn make_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static TABLE: [u32; 256] = make_table();

/// Standard CRC-32 (reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF).
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c = TABLE[usize::from(c.to_le_bytes()[0] ^ b)] ^ (c >> 8);
    }
    !c
}

/// The CPG group name of a lockspace, `dlm:ls:<name>` plus the NUL that the CPG name length
/// counts. At most 7 + 64 + 1 = 72 bytes, returned inline with its length.
pub fn lockspace_group_name(name: &LockspaceName) -> ([u8; 72], usize) {
    let mut buf = [0u8; 72];
    let n = name.as_bytes();
    buf[..7].copy_from_slice(b"dlm:ls:");
    buf[7..7 + n.len()].copy_from_slice(n);
    (buf, 7 + n.len() + 1)
}

/// The lockspace global id that the daemon writes to sysfs `id`, that the kernel puts in
/// every plock request's `fsid`, and that headers carry as `global_id`.
pub fn global_id(name: &LockspaceName) -> u32 {
    let (buf, len) = lockspace_group_name(name);
    crc32(&buf[..len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        let foo = LockspaceName::new(b"foo").expect("valid");
        // observed from the C daemon in the sysfs id write and START headers
        assert_eq!(global_id(&foo), 0x6ce2_339d);
        assert_eq!(global_id(&foo), 1_826_763_677);
        let (buf, len) = lockspace_group_name(&foo);
        assert_eq!(&buf[..len], b"dlm:ls:foo\0");
    }
}

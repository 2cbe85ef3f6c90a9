//! The id that a backend knows one acquisition by, and the client it comes
//! from.

use std::fmt::{self, Write as _};
use std::ops::Deref;
use std::sync::Arc;

use crate::lifecycle::Lifecycle;

/// Who a client is: its id (the prefix of its owner ids) and where it keeps
/// its locks. Shared by the client and every lock it holds; two tags are the
/// same client when they are the same allocation.
pub(crate) struct ClientTag {
    /// A random id: 32 hex digits.
    pub id: Arc<str>,
    /// Its Redis node (address and database) or Redlock nodes, or for the
    /// embedded backend its id: two clients with one place contend for the
    /// same locks.
    pub place: Box<str>,
    /// Shut down or not, and how many of its holds are alive.
    pub life: Lifecycle,
}

/// An owner id as the backend knows it: `<client id>:<n>`, where `n`
/// numbers the acquisitions of the client, so that no two acquisitions, in
/// this process or any other, share an id.
///
/// Written on the stack when a request needs it: a held lock keeps only its
/// number, and taking a lock allocates no id.
#[derive(Clone, Copy)]
pub(crate) struct OwnerId {
    len: u8,
    bytes: [u8; OwnerId::CAPACITY],
}

impl OwnerId {
    /// A client id (a UUID in 32 hex digits), a colon and a `u64`.
    const CAPACITY: usize = 32 + 1 + 20;

    pub(crate) fn new(client: &str, n: u64) -> Self {
        let mut id = OwnerId {
            len: 0,
            bytes: [0; Self::CAPACITY],
        };
        write!(id, "{client}:{n}").expect("a client id is 32 characters");
        id
    }
}

impl fmt::Write for OwnerId {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let start = usize::from(self.len);
        let end = start + s.len();
        let to = self.bytes.get_mut(start..end).ok_or(fmt::Error)?;
        to.copy_from_slice(s.as_bytes());
        self.len = u8::try_from(end).map_err(|_| fmt::Error)?;
        Ok(())
    }
}

impl Deref for OwnerId {
    type Target = str;

    fn deref(&self) -> &str {
        // Only whole `str`s are written.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).expect("UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::OwnerId;

    #[test]
    fn the_longest_owner_id_fits() {
        let client = "0123456789abcdef0123456789abcdef";
        let id = OwnerId::new(client, u64::MAX);
        assert_eq!(&*id, format!("{client}:{}", u64::MAX));
        assert_eq!(&*OwnerId::new(client, 7), format!("{client}:7"));
    }
}

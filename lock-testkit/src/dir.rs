//! Private temporary directories.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A private directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Makes `lock-<tag>-<pid>-<n>` (emptied first if a process of the same
    /// pid left one behind).
    pub fn try_new(tag: &str) -> std::io::Result<TempDir> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("lock-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }

    /// As [`TempDir::try_new`]; panics if the directory cannot be made.
    pub fn new(tag: &str) -> TempDir {
        TempDir::try_new(tag).expect("create temp dir")
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

//! qemu-user's `-L PREFIX` (`QEMU_LD_PREFIX`): an absolute path the guest
//! names is looked up under the prefix first, and the host's own path is
//! used when nothing exists there. That is how a dynamically linked guest
//! finds its interpreter, its libraries and files like `/etc/ld.so.cache`
//! in a cross sysroot while still reading the host's `/tmp` or `/proc`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The guest's view of the host's file system.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PathPrefix {
    /// `None` when there is no prefix (or it is `/`, which changes nothing).
    root: Option<PathBuf>,
}

impl PathPrefix {
    pub(crate) fn new(root: Option<&Path>) -> PathPrefix {
        let root = root
            .filter(|r| !r.as_os_str().is_empty() && *r != Path::new("/"))
            .map(Path::to_path_buf);
        PathPrefix { root }
    }

    /// The host path for guest path `path`: under the prefix if the guest
    /// path is absolute and something (even a dangling symlink) exists there.
    pub(crate) fn resolve(&self, path: &[u8]) -> Vec<u8> {
        match &self.root {
            Some(root) if path.first() == Some(&b'/') => {
                let mut under = root.as_os_str().as_bytes().to_vec();
                under.extend_from_slice(path);
                if Path::new(OsStr::from_bytes(&under))
                    .symlink_metadata()
                    .is_ok()
                {
                    under
                } else {
                    path.to_vec()
                }
            }
            _ => path.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths_prefer_the_prefix_and_fall_back_to_the_host() {
        let root = std::env::temp_dir().join(format!("tcgkit-prefix-{}", std::process::id()));
        std::fs::create_dir_all(root.join("lib")).expect("make prefix");
        std::fs::write(root.join("lib/libdemo.so"), b"x").expect("write lib");
        let prefix = PathPrefix::new(Some(&root));
        let inside = prefix.resolve(b"/lib/libdemo.so");
        assert_eq!(inside, root.join("lib/libdemo.so").as_os_str().as_bytes());
        assert_eq!(prefix.resolve(b"/lib/missing.so"), b"/lib/missing.so");
        assert_eq!(prefix.resolve(b"lib/libdemo.so"), b"lib/libdemo.so");
        assert_eq!(prefix.resolve(b""), b"");
        std::fs::remove_dir_all(&root).expect("clean up");
    }

    #[test]
    fn no_prefix_and_the_root_prefix_change_nothing() {
        for prefix in [PathPrefix::new(None), PathPrefix::new(Some(Path::new("/")))] {
            assert_eq!(prefix.resolve(b"/etc/passwd"), b"/etc/passwd");
        }
    }
}

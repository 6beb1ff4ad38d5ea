//! Unix sockets whose permissions do not depend on the umask, and the checks a client makes before it trusts
//! a socket file: the NBD socket (`--unix`, `--socket-mode`) and the control socket (`--control`).

use rustix::net::{AddressFamily, SocketAddrUnix, SocketType};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::Path;

/// Pending connections a listening socket queues.
const BACKLOG: i32 = 128;

/// Binds a listening Unix socket at `path` whose file has mode `mode` before any client can connect: the
/// socket is bound, given its mode, and only then listens (a connect before that is refused).
pub fn bind(path: &Path, mode: u32) -> io::Result<UnixListener> {
    let fd =
        rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, rustix::net::SocketFlags::CLOEXEC, None)?;
    rustix::net::bind(&fd, &SocketAddrUnix::new(path)?)?;
    let listening = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .and_then(|()| rustix::net::listen(&fd, BACKLOG).map_err(io::Error::from));
    if let Err(e) = listening {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(UnixListener::from(fd))
}

/// Why a socket file or its directory is not trusted.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("{path} belongs to uid {owner}, not to you (uid {me}) or root: refusing it (another user may have put it there)")]
    Owner { path: String, owner: u32, me: u32 },
    #[error("{path} is writable by other users (mode {mode:o}): refusing it")]
    Writable { path: String, mode: u32 },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
}

/// Checks that `path` (not following a final symlink) belongs to the calling user or root.
pub fn check_owner(path: &Path) -> Result<(), TrustError> {
    let m = std::fs::symlink_metadata(path)
        .map_err(|source| TrustError::Io { path: path.display().to_string(), source })?;
    let me = rustix::process::getuid().as_raw();
    if m.uid() != me && m.uid() != 0 {
        return Err(TrustError::Owner { path: path.display().to_string(), owner: m.uid(), me });
    }
    Ok(())
}

/// Makes `dir` (mode 0700) if missing, then checks it belongs to the calling user or root and that no one else
/// can write it, so that nobody else can create or replace a socket in it.
pub fn private_dir(dir: &Path) -> Result<(), TrustError> {
    let io = |source: io::Error| TrustError::Io { path: dir.display().to_string(), source };
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    check_owner(dir)?;
    let m = std::fs::symlink_metadata(dir).map_err(io)?;
    if !m.is_dir() {
        return Err(io(io::Error::other("not a directory")));
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(TrustError::Writable { path: dir.display().to_string(), mode });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::Mode;

    #[test]
    fn the_mode_is_set_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o600, 0o660, 0o666] {
            let p = dir.path().join(format!("s{mode:o}"));
            let old = rustix::process::umask(Mode::from_raw_mode(0o077));
            let l = bind(&p, mode);
            rustix::process::umask(old);
            let _l = l.unwrap();
            assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, mode);
            std::os::unix::net::UnixStream::connect(&p).unwrap();
        }
    }

    #[test]
    fn a_private_dir_is_made_and_a_shared_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("run");
        private_dir(&d).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&d).unwrap_err().to_string();
        assert!(e.contains("writable by other users (mode 777)"), "{e}");
        check_owner(&d).unwrap();
    }
}

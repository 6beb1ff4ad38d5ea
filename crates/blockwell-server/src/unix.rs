//! Unix sockets whose permissions do not depend on the umask, and the checks a client makes before it trusts
//! a socket file: the NBD socket (`--unix`, `--socket-mode`) and the control socket (`--control`).

use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

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

/// Why a listening socket cannot be put at a path (see [`replace_stale`]).
#[derive(Debug, thiserror::Error)]
pub enum SocketPathError {
    #[error("a server is listening on this socket; stop it first, or choose another path")]
    InUse(PathBuf),
    #[error("exists and is not a socket: refusing to replace it")]
    NotSocket(PathBuf),
    #[error("an existing socket that cannot be probed ({source}): refusing to replace it")]
    Unknown { path: PathBuf, source: io::Error },
}

impl From<SocketPathError> for io::Error {
    fn from(e: SocketPathError) -> io::Error {
        let kind = match &e {
            SocketPathError::InUse(_) => io::ErrorKind::AddrInUse,
            SocketPathError::NotSocket(_) => io::ErrorKind::AlreadyExists,
            SocketPathError::Unknown { source, .. } => source.kind(),
        };
        io::Error::new(kind, e)
    }
}

/// Makes room for a listening socket at `path`: a socket file that no process listens on (left by a server that
/// was killed) is removed; a socket some process listens on, a socket that cannot be probed, or any file that
/// is not a socket is refused and left alone. The probe is a non-blocking connect: refused means nobody listens;
/// accepted, or a full backlog, means a live server.
pub fn replace_stale(path: &Path) -> Result<(), SocketPathError> {
    let unknown = |source: io::Error| SocketPathError::Unknown { path: path.to_path_buf(), source };
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(unknown(e)),
    };
    if !m.file_type().is_socket() {
        return Err(SocketPathError::NotSocket(path.to_path_buf()));
    }
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(|e| unknown(e.into()))?;
    let addr = SocketAddrUnix::new(path).map_err(|e| unknown(e.into()))?;
    match rustix::net::connect(&fd, &addr) {
        Ok(()) | Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INPROGRESS) => {
            Err(SocketPathError::InUse(path.to_path_buf()))
        }
        Err(rustix::io::Errno::CONNREFUSED) => match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(unknown(e)),
        },
        Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(unknown(e.into())),
    }
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
    fn only_a_socket_nobody_listens_on_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        replace_stale(&p).unwrap();
        // A live listener is refused and keeps its socket.
        let live = bind(&p, 0o600).unwrap();
        assert!(matches!(replace_stale(&p), Err(SocketPathError::InUse(_))));
        std::os::unix::net::UnixStream::connect(&p).unwrap();
        // Closed without removing its file (as after kill -9): replaced.
        drop(live);
        assert!(p.exists());
        replace_stale(&p).unwrap();
        assert!(!p.exists());
        let _l = bind(&p, 0o600).unwrap();
        // A regular file is never removed.
        let f = dir.path().join("f");
        std::fs::write(&f, b"data").unwrap();
        let e = replace_stale(&f).unwrap_err();
        assert!(matches!(e, SocketPathError::NotSocket(_)), "{e}");
        assert_eq!(std::fs::read(&f).unwrap(), b"data");
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

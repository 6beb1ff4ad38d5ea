//! SIGHUP: the TLS certificates and the exports of the config file, read again and applied where that is safe.
//!
//! - TLS certificates: new handshakes use the rotated files; open connections keep theirs.
//! - Exports (with `--config`): an export whose table is unchanged is kept as it is (clients, cache, counters);
//!   a new table is opened (its files claimed) and served to new clients at once; a table no longer in the
//!   file is hidden from new clients, goes on serving its open connections, and is closed when the last one
//!   ends (flushed, its cache device shut down cleanly, its files released; a `retire` event). A table that
//!   changed, and anything that fails to open, refuse the whole reload: nothing changes and the `reload` event
//!   says why. (Changing an export in place would need its files twice: remove it in one reload and add it back
//!   in the next, or restart.)
//! - `default_export` and `list` follow the file. Other settings (addresses, limits, TLS mode, `[content]`)
//!   keep their running values; the `reload` event lists those that differ as `restart_needed`.

use super::{build_export, log::Json, Args, Current, Live, ServeConfig};
use anyhow::{anyhow, bail, Context};
use blockwell_server::content::ContentStore;
use blockwell_server::nbd::{tls, Export, ServerHandle};
use serde_json::json;
use std::sync::Arc;
use std::thread::JoinHandle;
use tracing::{error, info, warn};

/// What a reload works on: the running server and the config in force.
pub(super) struct Reloader<'a> {
    pub args: &'a Args,
    pub cfg: ServeConfig,
    pub store: Option<Arc<ContentStore>>,
    pub handle: &'a ServerHandle,
    pub current: Arc<Current>,
    /// An export's URI, by name.
    pub uri: &'a dyn Fn(&str) -> String,
    /// Removed exports waiting for their last connection.
    pub retiring: Vec<JoinHandle<()>>,
}

/// What one reload did.
#[derive(Default)]
struct Changes {
    added: Vec<String>,
    removed: Vec<String>,
    restart_needed: Vec<&'static str>,
}

impl Reloader<'_> {
    /// One SIGHUP: certificates, then exports; one `reload` event either way.
    pub fn reload(&mut self) {
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Reloading]);
        let certs = self.cfg.tls_certificates.clone();
        let mut changes = Changes::default();
        let result = self.reload_tls().and_then(|()| self.reload_exports(&mut changes));
        let nothing = self.args.config.is_none() && certs.is_none();
        match result {
            Ok(()) if nothing => {
                warn!(error = "nothing to reload: no --config and no TLS certificates", "reload")
            }
            Ok(()) => info!(
                added = ?Json(json!(changes.added)),
                removed = ?Json(json!(changes.removed)),
                exports = self.current.now().len(),
                restart_needed = ?Json(json!(changes.restart_needed)),
                tls_certificates = ?Json(json!(certs)),
                "reload"
            ),
            Err(e) => error!(error = %format!("{e:#}"), tls_certificates = ?Json(json!(certs)), "reload"),
        }
        self.retiring.retain(|t| !t.is_finished());
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    }

    fn reload_tls(&self) -> anyhow::Result<()> {
        let Some(dir) = &self.cfg.tls_certificates else { return Ok(()) };
        let c = tls::load(dir, self.cfg.tls_verify_peer).context("--tls-certificates")?;
        self.handle.reload_tls(c).context("--tls-certificates")
    }

    fn reload_exports(&mut self, changes: &mut Changes) -> anyhow::Result<()> {
        let Some(file) = self.args.config.as_deref() else { return Ok(()) };
        // The file with the command line's overrides, checked as at start.
        let next = self.args.config()?;
        changes.restart_needed = restart_needed(&self.cfg, &next);
        let running = self.handle.exports();
        let live = self.current.now();
        for e in &next.exports {
            if let Some(old) = self.cfg.exports.iter().find(|o| o.name == e.name) {
                if old != e {
                    bail!(
                        "{}: export \"{}\" changed; an export cannot change while served: remove it in one reload \
                         and add it back in the next, or restart",
                        file.display(),
                        e.name
                    );
                }
            }
        }
        if next.exports.iter().any(|e| e.stack.content) && self.store.is_none() {
            bail!(
                "{}: a new content export needs the [content] cache, which starts with the server: restart",
                file.display()
            );
        }
        // Open the new exports first: a failure drops them (releasing their files) and changes nothing.
        let mut exports = Vec::new();
        let mut lives = Vec::new();
        for e in &next.exports {
            if self.cfg.exports.iter().any(|o| o.name == e.name) {
                let lost = || anyhow!("export {} is not running", e.name);
                exports.push(running.iter().find(|x| x.name == e.name).ok_or_else(lost)?.clone());
                lives.push(live.iter().find(|l| l.name == e.name).ok_or_else(lost)?.clone());
            } else {
                let (x, l) = build_export(e, self.store.as_ref(), Some(file))?;
                changes.added.push(e.name.clone());
                exports.push(x);
                lives.push(Arc::new(l));
            }
        }
        let retired = self
            .handle
            .set_exports(exports, next.default_export.as_deref(), next.list.unwrap_or(true))
            .with_context(|| file.display().to_string())?;
        self.current.set(lives.clone());
        for name in &changes.added {
            if let Some(l) = lives.iter().find(|l| &l.name == name) {
                l.log_export(&(self.uri)(name));
            }
        }
        for r in retired {
            let name = r.export().name.clone();
            changes.removed.push(name.clone());
            let l = live.iter().find(|l| l.name == name).cloned();
            let connections = r.connections();
            let t = std::thread::Builder::new().name(format!("retire-{name}")).spawn(move || retire(r, l));
            match t {
                Ok(t) => self.retiring.push(t),
                Err(e) => error!(name = name.as_str(), connections, error = %e, "retire"),
            }
        }
        self.cfg.exports = next.exports;
        self.cfg.default_export = next.default_export;
        self.cfg.list = next.list;
        Ok(())
    }
}

/// A removed export's end, once its last client has left: flushed, then its cache device shut down and its
/// summary logged (as at a stop), then closed.
fn retire(r: blockwell_server::nbd::Retired, live: Option<Arc<Live>>) {
    let name = r.export().name.clone();
    let flushed: Result<Export, _> = r.wait();
    if let Some(l) = &live {
        l.finish();
    }
    match flushed {
        Ok(_) => info!(name = name.as_str(), "retire"),
        Err(e) => error!(name = name.as_str(), error = %e, "retire"),
    }
}

/// The settings a reload does not apply, by config key, that differ between `old` and `new`.
fn restart_needed(old: &ServeConfig, new: &ServeConfig) -> Vec<&'static str> {
    let mut keys = Vec::new();
    let mut differ = |key: &'static str, same: bool| {
        if !same {
            keys.push(key);
        }
    };
    differ("listen", old.listen == new.listen);
    differ("unix", old.unix == new.unix);
    differ("socket_mode", old.socket_mode == new.socket_mode);
    differ("control", old.control == new.control);
    differ("metrics", old.metrics == new.metrics);
    differ("busy_poll_us", old.busy_poll_us == new.busy_poll_us);
    differ("sched", old.sched == new.sched);
    differ("max_connections", old.max_connections == new.max_connections);
    differ("handshake_timeout", old.handshake_timeout == new.handshake_timeout);
    differ("idle_timeout", old.idle_timeout == new.idle_timeout);
    differ("shutdown_timeout", old.shutdown_timeout == new.shutdown_timeout);
    differ("tls", old.tls == new.tls);
    differ("tls_certificates", old.tls_certificates == new.tls_certificates);
    differ("tls_verify_peer", old.tls_verify_peer == new.tls_verify_peer);
    differ("allow_insecure_listen", old.allow_insecure_listen == new.allow_insecure_listen);
    differ("pidfile", old.pidfile == new.pidfile);
    differ("content", old.content == new.content);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn restart_needed_names_the_keys_a_reload_leaves() {
        let parse = |t: &str| ServeConfig::parse(t, "t.toml", Path::new("/")).unwrap();
        let old = parse("listen = \"127.0.0.1:1\"\n[[export]]\nname = \"a\"\nbackend = \"/a\"\n");
        let new = parse(
            "listen = \"127.0.0.1:2\"\nmax_connections = 9\nlist = false\n[[export]]\nname = \"b\"\nbackend = \"/b\"\n",
        );
        assert_eq!(restart_needed(&old, &new), ["listen", "max_connections"]);
        assert!(restart_needed(&old, &old).is_empty());
    }
}

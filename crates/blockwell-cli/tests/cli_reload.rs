//! SIGHUP with `--config`: exports added, kept and removed on a running `blockwell serve`, with real clients
//! on them; a changed export, a broken file and a file that cannot be opened refuse the whole reload; settings
//! that need a restart are named.

mod util;

use std::io::BufRead;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use blockwell_testkit::nbd::{RawClient, CMD_FLUSH, CMD_WRITE};
use util::serve::{status, Served};

/// The JSON log lines of a server, as they come.
fn events(s: &mut Served) -> Receiver<serde_json::Value> {
    let err = std::io::BufReader::new(s.child.stderr.take().unwrap());
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in err.lines().map_while(Result::ok) {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
            if tx.send(v).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next event named `name` (others skipped).
fn next(rx: &Receiver<serde_json::Value>, name: &str) -> serde_json::Value {
    loop {
        let v = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("no {name} event"));
        if v["event"] == name {
            return v;
        }
    }
}

fn hup(s: &Served) {
    assert!(Command::new("kill").args(["-HUP", &s.child.id().to_string()]).status().unwrap().success());
}

fn write_config(path: &Path, extra: &str, exports: &[&str]) {
    let mut text = format!("control = \"ctl.sock\"\n{extra}\n");
    for e in exports {
        text.push_str("\n[[export]]\n");
        text.push_str(e);
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

const A: &str = "name = \"a\"\nbackend = \"a.img\"\ncache = \"1MiB\"";
const B: &str = "name = \"b\"\nbackend = \"b.img\"\ncache = \"1MiB\"";
const C: &str =
    "name = \"c\"\nbackend = \"c.img\"\ncache = 0\ncache_dev = \"c.dev\"\ncache_dev_size = \"8MiB\"\nmode = \"write-back\"";

#[test]
fn sighup_adds_keeps_and_retires_exports() {
    let d = tempfile::tempdir().unwrap();
    for (f, mib) in [("a.img", 4), ("b.img", 4), ("c.img", 8)] {
        std::fs::File::create(d.path().join(f)).unwrap().set_len(mib << 20).unwrap();
    }
    let cfg = d.path().join("exports.toml");
    write_config(&cfg, "", &[A, B]);
    let mut s = Served::start(&["--config", cfg.to_str().unwrap(), "--log-format", "json"]);
    let rx = events(&mut s);
    next(&rx, "start");
    let addr = s.addr();
    let ctl = d.path().join("ctl.sock");

    // A client stays on a; then a is removed, b kept, c (a write-back cache device) added.
    let mut on_a = RawClient::open(&addr, "a").unwrap();
    let mut on_b = RawClient::open(&addr, "b").unwrap();
    write_config(&cfg, "", &[B, C]);
    hup(&s);
    // The added export's `export` line, then the `reload` line.
    let e = next(&rx, "export");
    assert_eq!(e["name"], "c");
    assert!(e["uri"].as_str().unwrap().ends_with("/c"), "{e}");
    let r = next(&rx, "reload");
    assert_eq!((r["added"].clone(), r["removed"].clone()), (serde_json::json!(["c"]), serde_json::json!(["a"])), "{r}");
    assert_eq!(r["exports"], 2, "{r}");
    assert_eq!(r["restart_needed"], serde_json::json!([]), "{r}");

    // New clients see b and c, not a; status lists b and c.
    assert!(RawClient::open(&addr, "a").is_err(), "a is gone for new clients");
    let mut on_c = RawClient::open(&addr, "c").unwrap();
    assert_eq!(on_c.size, 8 << 20);
    on_c.send(CMD_WRITE, 1, 0, 4096, &[0xc5; 4096]).unwrap();
    assert_eq!(on_c.reply().unwrap(), (0, 1));
    on_c.send(CMD_FLUSH, 2, 0, 0, &[]).unwrap();
    assert_eq!(on_c.reply().unwrap(), (0, 2));
    let st = status(&ctl, false);
    assert!(st.starts_with("b: ") && st.contains("\nc: write-back") && !st.contains("\na: "), "{st}");
    // The clients from before go on, on the removed export too.
    on_a.send(CMD_WRITE, 3, 0, 512, &[0xa1; 512]).unwrap();
    assert_eq!(on_a.reply().unwrap(), (0, 3));
    assert_eq!(on_a.read(0, 512).unwrap().unwrap(), vec![0xa1; 512]);
    assert_eq!(on_b.read(0, 512).unwrap().unwrap(), vec![0; 512]);
    // a's file stays claimed while its client is on it...
    let e = util::fails(&["serve", "--backend", d.path().join("a.img").to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert!(e.contains("in use by process"), "{e}");
    // ...and is flushed, summarised and released when the client leaves.
    drop(on_a);
    let sum = next(&rx, "summary");
    assert_eq!((sum["name"].clone(), sum["cache"]["write_requests"].clone()), ("a".into(), 1.into()), "{sum}");
    assert_eq!(next(&rx, "retire")["name"], "a");
    assert_eq!(&std::fs::read(d.path().join("a.img")).unwrap()[..512], &[0xa1; 512][..]);
    let again = Served::start(&["--backend", d.path().join("a.img").to_str().unwrap()]);
    assert!(again.stop().0);

    // c removed with no client left: its cache device is shut down cleanly, its dirty block kept.
    drop(on_c);
    write_config(&cfg, "", &[B]);
    hup(&s);
    assert_eq!(next(&rx, "reload")["removed"], serde_json::json!(["c"]));
    assert_eq!(next(&rx, "retire")["name"], "c");
    let st = util::ok(&["cache", "status", d.path().join("c.dev").to_str().unwrap()]);
    assert!(st.contains("shut down cleanly") && st.contains(" 1 dirty,"), "{st}");

    // Refused as a whole: a changed export, a broken file, an export that cannot open. b keeps serving.
    write_config(&cfg, "", &["name = \"b\"\nbackend = \"b.img\"\ncache = \"2MiB\"", A]);
    hup(&s);
    let r = next(&rx, "reload");
    assert!(r["error"].as_str().unwrap().contains("export \"b\" changed"), "{r}");
    assert_eq!(r["level"], "error");
    std::fs::write(
        &cfg,
        "control = \"ctl.sock\"\n[[export]]\nname = \"b\"\nbackend = \"b.img\"\ncache = \"1MiB\"\nbogus = 1\n",
    )
    .unwrap();
    hup(&s);
    let r = next(&rx, "reload");
    assert!(r["error"].as_str().unwrap().contains("exports.toml:6"), "names the line: {r}");
    write_config(&cfg, "", &[B, A, "name = \"z\"\nbackend = \"missing.img\""]);
    hup(&s);
    let r = next(&rx, "reload");
    assert!(r["error"].as_str().unwrap().contains("export \"z\""), "{r}");
    assert!(RawClient::open(&addr, "a").is_err(), "a was opened then dropped with the failed reload");
    let again = Served::start(&["--backend", d.path().join("a.img").to_str().unwrap()]);
    assert!(again.stop().0, "a's file is released again");
    assert_eq!(on_b.read(0, 512).unwrap().unwrap(), vec![0; 512]);

    // A setting that needs a restart is named and left as it runs; the exports change.
    write_config(&cfg, "max_connections = 5", &[B, A]);
    hup(&s);
    let r = next(&rx, "reload");
    assert_eq!(
        (r["added"].clone(), r["restart_needed"].clone()),
        (serde_json::json!(["a"]), serde_json::json!(["max_connections"])),
        "{r}"
    );
    assert_eq!(r["level"], "info");
    assert_eq!(RawClient::open(&addr, "a").unwrap().read(0, 512).unwrap().unwrap(), vec![0xa1; 512]);
    drop(on_b);
    let (ok, rest) = s.stop();
    assert!(ok && rest.contains("stopped; b: ") && rest.contains("stopped; a: "), "{rest}");
}
